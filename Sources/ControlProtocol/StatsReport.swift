/// The answer to `stats`: the host's counters as numbers — the bus, the process, each module
/// (with its handler-duration histogram) and each tailing client — what `eventbus top` shows,
/// without the Prometheus text the `metrics` answer carries.
public struct StatsReport: CodableAnswer, Equatable {
    public static let type = "stats"

    public var processID: Int64
    public var uptimeSeconds: Double
    /// Events posted on the bus (its newest sequence number).
    public var posted: Int64
    public var subscriptions: Int64
    /// Control clients connected.
    public var clients: Int64
    /// The host process (nil when `/proc/self` could not be read).
    public var process: Process?
    public var modules: [Module]
    public var tailing: [TailingClient]
    /// `stopping` while the host shuts down: set with ``stopping``.
    public private(set) var state = HostState.running
    /// Set while the host shuts down: what it still has to do.
    public var stopping: StoppingReport? {
        didSet { state = HostState(stopping) }
    }

    public struct Process: Codable, Sendable, Equatable {
        public var residentBytes: Int64
        public var openFiles: Int64
        public var threads: Int64

        public init(residentBytes: Int64, openFiles: Int64, threads: Int64) {
            self.residentBytes = residentBytes
            self.openFiles = openFiles
            self.threads = threads
        }

        enum CodingKeys: String, CodingKey {
            case threads
            case residentBytes = "resident_bytes"
            case openFiles = "open_files"
        }
    }

    public struct Module: Codable, Sendable, Equatable {
        public var name: String
        public var state: String
        public var delivered: Int64
        public var dropped: Int64
        public var queued: Int64
        public var errors: Int64
        /// Handler durations (one call in 8 is timed): cumulative counts of calls that took at
        /// most each bound, in seconds; the last count (bound +∞) is every timed call. Nil for
        /// modules whose handlers are not timed (a worker's, or plain `sink`s).
        public var handlerSeconds: Histogram?

        public init(name: String, state: String, delivered: Int64, dropped: Int64, queued: Int64, errors: Int64,
                    handlerSeconds: Histogram?) {
            self.name = name
            self.state = state
            self.delivered = delivered
            self.dropped = dropped
            self.queued = queued
            self.errors = errors
            self.handlerSeconds = handlerSeconds
        }

        enum CodingKeys: String, CodingKey {
            case name, state, delivered, dropped, queued, errors
            case handlerSeconds = "handler_seconds"
        }
    }

    /// Cumulative bucket counts: `counts[i]` observations were at most `bounds[i]`; the last
    /// count, one more than the bounds, is all of them (+∞).
    public struct Histogram: Codable, Sendable, Equatable {
        public var bounds: [Double]
        public var counts: [Int64]

        public init(bounds: [Double], counts: [Int64]) {
            self.bounds = bounds
            self.counts = counts
        }

        enum CodingKeys: String, CodingKey {
            case counts
            case bounds = "le"
        }

        /// A quantile: within the bounds, or past the last one (`above` it).
        public enum Quantile: Equatable, Sendable {
            case value(Double)
            case above(Double)
        }

        /// The `q` quantile, interpolated within its bucket as Prometheus's
        /// `histogram_quantile` does; nil when nothing was observed.
        public func quantile(_ q: Double) -> Quantile? {
            guard let total = counts.last, total > 0, counts.count == bounds.count + 1 else { return nil }
            let target = q * Double(total)
            var lower = (bound: 0.0, count: 0.0)
            for (index, count) in counts.enumerated() {
                let count = Double(count)
                if count >= target {
                    guard index < bounds.count else { return .above(lower.bound) }
                    let share = count > lower.count ? (target - lower.count) / (count - lower.count) : 1
                    return .value(lower.bound + (bounds[index] - lower.bound) * share)
                }
                if index < bounds.count { lower = (bounds[index], count) }
            }
            return nil
        }

        /// What was observed since `earlier` (the same buckets, taken before).
        public func since(_ earlier: Histogram) -> Histogram {
            guard earlier.bounds == bounds, earlier.counts.count == counts.count else { return self }
            return Histogram(bounds: bounds, counts: zip(counts, earlier.counts).map { $0 - $1 })
        }
    }

    public struct TailingClient: Codable, Sendable, Equatable {
        public var client: Int64
        public var userID: Int64
        public var processID: Int64
        public var delivered: Int64
        public var dropped: Int64
        public var queued: Int64
        public var queuedBytes: Int64

        public init(client: Int64, userID: Int64, processID: Int64, delivered: Int64, dropped: Int64, queued: Int64, queuedBytes: Int64) {
            self.client = client
            self.userID = userID
            self.processID = processID
            self.delivered = delivered
            self.dropped = dropped
            self.queued = queued
            self.queuedBytes = queuedBytes
        }

        enum CodingKeys: String, CodingKey {
            case client, delivered, dropped, queued
            case userID = "uid"
            case processID = "pid"
            case queuedBytes = "queued_bytes"
        }
    }

    public init(processID: Int64, uptimeSeconds: Double, posted: Int64, subscriptions: Int64, clients: Int64,
                process: Process?, modules: [Module], tailing: [TailingClient]) {
        self.processID = processID
        self.uptimeSeconds = uptimeSeconds
        self.posted = posted
        self.subscriptions = subscriptions
        self.clients = clients
        self.process = process
        self.modules = modules
        self.tailing = tailing
    }

    enum CodingKeys: String, CodingKey {
        case posted, subscriptions, clients, process, modules, tailing, state, stopping
        case processID = "pid"
        case uptimeSeconds = "uptime_seconds"
    }
}
