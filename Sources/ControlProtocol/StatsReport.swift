/// The answer to `stats`: the host's counters as numbers — the bus, the process, each module
/// (with its handler-duration histogram) and each tailing client — what `eventbus top` shows,
/// without the Prometheus text the `metrics` answer carries.
public struct StatsReport: Equatable, Sendable {
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
    /// Set while the host shuts down (`state` `stopping`): what it still has to do.
    public var stopping: StoppingReport?

    public struct Process: Sendable, Equatable {
        public var residentBytes: Int64
        public var openFiles: Int64
        public var threads: Int64

        public init(residentBytes: Int64, openFiles: Int64, threads: Int64) {
            self.residentBytes = residentBytes
            self.openFiles = openFiles
            self.threads = threads
        }
    }

    public struct Module: Sendable, Equatable {
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
    }

    /// Cumulative bucket counts: `counts[i]` observations were at most `bounds[i]`; the last
    /// count, one more than the bounds, is all of them (+∞).
    public struct Histogram: Sendable, Equatable {
        public var bounds: [Double]
        public var counts: [Int64]

        public init(bounds: [Double], counts: [Int64]) {
            self.bounds = bounds
            self.counts = counts
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

    public struct TailingClient: Sendable, Equatable {
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

    public var json: JSON {
        var answer: [String: JSON] = [
            "type": "stats",
            "pid": .int(processID),
            "uptime_seconds": .double(uptimeSeconds),
            "posted": .int(posted),
            "subscriptions": .int(subscriptions),
            "clients": .int(clients),
            "modules": .array(modules.map { module in
                var members: [String: JSON] = [
                    "name": .string(module.name), "state": .string(module.state),
                    "delivered": .int(module.delivered), "dropped": .int(module.dropped),
                    "queued": .int(module.queued), "errors": .int(module.errors),
                ]
                if let histogram = module.handlerSeconds {
                    members["handler_seconds"] = ["le": .array(histogram.bounds.map(JSON.double)),
                                                  "counts": .array(histogram.counts.map(JSON.int))]
                }
                return .object(members)
            }),
            "tailing": .array(tailing.map { client in
                [
                    "client": .int(client.client), "uid": .int(client.userID), "pid": .int(client.processID),
                    "delivered": .int(client.delivered), "dropped": .int(client.dropped),
                    "queued": .int(client.queued), "queued_bytes": .int(client.queuedBytes),
                ]
            }),
        ]
        if let process {
            answer["process"] = ["resident_bytes": .int(process.residentBytes), "open_files": .int(process.openFiles),
                                 "threads": .int(process.threads)]
        }
        answer["state"] = StoppingReport.state(stopping)
        if let stopping { answer["stopping"] = stopping.json }
        return .object(answer)
    }

    init(_ members: Members) throws(ResponseDecodingError) {
        func number(_ value: JSON?) -> Int64 { value?.intValue ?? 0 }
        processID = number(members["pid"])
        uptimeSeconds = members["uptime_seconds"]?.doubleValue ?? 0
        posted = try members.int("posted")
        subscriptions = number(members["subscriptions"])
        clients = number(members["clients"])
        process = members["process"].map { process in
            Process(residentBytes: number(process["resident_bytes"]), openFiles: number(process["open_files"]),
                    threads: number(process["threads"]))
        }
        modules = (members["modules"]?.arrayValue ?? []).map { module in
            let histogram = module["handler_seconds"].map { histogram in
                Histogram(bounds: (histogram["le"]?.arrayValue ?? []).compactMap(\.doubleValue),
                          counts: (histogram["counts"]?.arrayValue ?? []).map { $0.intValue ?? 0 })
            }
            return Module(name: module["name"]?.stringValue ?? "?", state: module["state"]?.stringValue ?? "?",
                          delivered: number(module["delivered"]), dropped: number(module["dropped"]),
                          queued: number(module["queued"]), errors: number(module["errors"]), handlerSeconds: histogram)
        }
        tailing = try members.array("tailing").map { client in
            TailingClient(client: number(client["client"]), userID: number(client["uid"]), processID: number(client["pid"]),
                          delivered: number(client["delivered"]), dropped: number(client["dropped"]),
                          queued: number(client["queued"]), queuedBytes: number(client["queued_bytes"]))
        }
        stopping = StoppingReport(members)
    }
}
