import CoreMetrics
import Foundation
import Metrics

/// How long each module's handlers take: one histogram per module,
/// `eventbus_module_handler_duration_seconds{module="…"}`, recorded through swift-metrics'
/// `Timer` into the host's ``MetricsRegistry``.
///
/// Recording is two `clock_gettime` reads around a handler call (in the SDK's `handle(in:)`)
/// and one histogram update (a lock and a bucket increment) on the module's own queue: no work
/// on the bus's delivery loop.
public final class HandlerDurations: Sendable {
    /// Seconds, from 1 µs to 10 s: handlers of a bus range from a counter bump to a network call.
    public static let buckets: [Duration] = [
        .microseconds(1), .microseconds(5), .microseconds(10), .microseconds(25), .microseconds(50),
        .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2.5),
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
    ]
    public static let metricName = "eventbus_module_handler_duration_seconds"

    private let factory: any MetricsFactory

    public init(registry: MetricsRegistry) {
        self.factory = registry.factory
    }

    /// What a module's context records into (``ModuleContext/handlerDuration``): its timer, made
    /// once per module name (the registry returns the same histogram for the same labels).
    public func recorder(forModule name: String) -> @Sendable (Int64) -> Void {
        let timer = Metrics.Timer(label: Self.metricName, dimensions: [("module", name)], factory: factory)
        return { nanoseconds in timer.recordNanoseconds(nanoseconds) }
    }
}
