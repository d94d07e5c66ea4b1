import Foundation
import Prometheus

/// The host's metrics: one swift-prometheus registry, filled at scrape time from counters the
/// host already keeps. (The histograms recorded as things happen are ``HandlerDurations``'.)
///
/// Why at scrape time: the host already counts what operators want (posted, delivered, dropped,
/// queued, errors…) on its own paths. Copying those counts into the registry when someone
/// scrapes costs the delivery path nothing; a Prometheus counter updated per event would cost
/// an atomic per delivery per metric.
///
/// ## Threads
/// ``render(collect:)`` may be called from any thread (the HTTP listener's, the control loop's);
/// one lock makes each scrape whole — collecting and writing the text — so two scrapes never
/// interleave their updates.
public final class MetricsRegistry: @unchecked Sendable {
    // @unchecked: `scraped` and `seen` are touched only under `lock`.

    public let registry = PrometheusCollectorRegistry()

    private let lock = NSLock()
    /// Counters and gauges set from absolute values, by name and labels.
    private var scraped: [Key: Scraped] = [:]
    /// What the current scrape set: anything set before and not now (a module removed by a
    /// reload) leaves the output.
    private var seen: Set<Key> = []

    private struct Key: Hashable {
        var name: String
        var labels: [String]
    }

    private enum Scraped {
        /// A counter and the total it was last set to.
        case counter(Prometheus.Counter, last: UInt64)
        case gauge(Prometheus.Gauge)
    }

    public init() {}

    /// Runs `collect` — which sets values with ``Scrape/counter(_:help:labels:total:)`` and
    /// ``Scrape/gauge(_:help:labels:value:)`` — and returns the whole registry in Prometheus's
    /// text format (version 0.0.4).
    public func render(collect: (inout Scrape) -> Void) -> [UInt8] {
        lock.withLock {
            var scrape = Scrape(registry: self)
            collect(&scrape)
            for key in scraped.keys where !seen.contains(key) {
                switch scraped.removeValue(forKey: key)! {
                case .counter(let counter, _): registry.unregisterCounter(counter)
                case .gauge(let gauge): registry.unregisterGauge(gauge)
                }
            }
            seen.removeAll(keepingCapacity: true)
            return registry.emitToBuffer()
        }
    }

    /// What a collecting closure sets values through; valid only during ``render(collect:)``.
    public struct Scrape {
        fileprivate let registry: MetricsRegistry

        /// Sets the counter `name{labels}` to `total`, a count the host keeps. A total lower
        /// than the last one (its source was made anew, e.g. a module slot after a reload)
        /// restarts the counter, as Prometheus expects of a counter reset.
        public mutating func counter(_ name: String, help: String, labels: [(String, String)] = [], total: UInt64) {
            let key = Key(name: name, labels: labels.flatMap { [$0.0, $0.1] })
            registry.seen.insert(key)
            if case .counter(let counter, let last) = registry.scraped[key] {
                if total >= last {
                    counter.increment(by: Int64(clamping: total - last))
                } else {
                    counter.reset()
                    counter.increment(by: Int64(clamping: total))
                }
                registry.scraped[key] = .counter(counter, last: total)
                return
            }
            let counter = registry.registry.makeCounter(descriptor: Self.descriptor(name, help), labels: labels)
            counter.reset()
            counter.increment(by: Int64(clamping: total))
            registry.scraped[key] = .counter(counter, last: total)
        }

        /// The whole name in `metricName`: ours already carry their unit (`_total`, `_bytes`).
        private static func descriptor(_ name: String, _ help: String) -> MetricNameDescriptor {
            MetricNameDescriptor(metricName: name, unitName: "", helpText: help)
        }

        /// Sets the gauge `name{labels}` to `value`.
        public mutating func gauge(_ name: String, help: String, labels: [(String, String)] = [], value: Double) {
            let key = Key(name: name, labels: labels.flatMap { [$0.0, $0.1] })
            registry.seen.insert(key)
            if case .gauge(let gauge) = registry.scraped[key] {
                gauge.set(to: value)
                return
            }
            let gauge = registry.registry.makeGauge(descriptor: Self.descriptor(name, help), labels: labels)
            gauge.set(to: value)
            registry.scraped[key] = .gauge(gauge)
        }
    }
}
