import Synchronization

/// How long each module's handlers take: one histogram per module,
/// `eventbus_module_handler_duration_seconds{module="…"}`, recorded into a lock-free
/// ``DurationHistogram`` and written with the registry's text.
///
/// Recording happens on the module's own queue, for one handler call in
/// `ModuleContext.handlerTimingInterval` (two `clock_gettime` reads around it, in the SDK's
/// `handle(in:)`): no work on the bus's delivery loop.
public final class HandlerDurations: Sendable {
    /// Seconds, from 1 µs to 10 s: handlers of a bus range from a counter bump to a network call.
    public static let buckets: [Duration] = [
        .microseconds(1), .microseconds(5), .microseconds(10), .microseconds(25), .microseconds(50),
        .microseconds(100), .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2.5),
        .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
        .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
    ]
    public static let metricName = "eventbus_module_handler_duration_seconds"

    /// By module name; a module keeps its histogram across reloads (its counts go on).
    private let histograms = Mutex<[String: DurationHistogram]>([:])

    public init() {}

    /// What a module's context records into (`ModuleContext.handlerDuration`).
    public func recorder(forModule name: String) -> @Sendable (Int64) -> Void {
        let histogram = histograms.withLock { histograms in
            if let existing = histograms[name] { return existing }
            let made = DurationHistogram(name: Self.metricName, labels: [("module", name)], buckets: Self.buckets)
            histograms[name] = made
            return made
        }
        return { nanoseconds in histogram.recordNanoseconds(nanoseconds) }
    }

    /// The buckets' upper bounds in seconds (the last bucket, +Inf, is implicit).
    public static let boundsInSeconds: [Double] = buckets.map { duration in
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// The module's cumulative bucket counts, one per bound and the last for +Inf (every timed
    /// call); nil when its handlers were never timed.
    public func cumulativeCounts(forModule name: String) -> [UInt64]? {
        histograms.withLock { $0[name] }?.cumulativeCounts()
    }

    /// The histograms of `modules` (others — modules removed by a reload — are left out), in
    /// Prometheus's text format.
    public func text(for modules: Set<String>) -> String {
        let histograms = self.histograms.withLock { $0 }.filter { modules.contains($0.key) }.sorted { $0.key < $1.key }
        guard !histograms.isEmpty else { return "" }
        var text = "# HELP \(Self.metricName) Duration of the module's handle(in:) handler calls (one in 8 is timed).\n"
        text += "# TYPE \(Self.metricName) histogram\n"
        for (_, histogram) in histograms { histogram.emit(into: &text) }
        return text
    }
}
