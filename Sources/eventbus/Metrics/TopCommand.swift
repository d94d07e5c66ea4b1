import ArgumentParser
import ControlProtocol
import Foundation

/// `eventbus top`: a live view of the running host, like `systemd-cgtop` — modules and control
/// clients with their rates, queue depths, drops and handler p99, refreshed each second.
///
/// Built on the control socket's `status`, `stats` and `metrics` answers, one of each per frame
/// on one connection; rates and the p99 are over the interval between two frames.
struct TopCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "top",
        abstract: "Live view of the running eventbusd: modules and clients with rates, queues, drops, handler p99.",
        discussion: "Refreshes every --interval seconds until interrupted (Ctrl-C). --once prints one frame (rates over one interval) and exits, for scripts.")

    @Flag(help: "Print one frame, measured over one interval, and exit.")
    var once = false

    @Option(help: "Seconds between frames (0.2 to 60).")
    var interval: Double = 1

    @OptionGroup var socket: SocketOptions

    func validate() throws {
        guard interval >= 0.2, interval <= 60 else { throw ValidationError("--interval must be from 0.2 to 60 seconds") }
    }

    func run() throws {
        let host = try socket.connect()
        var previous = try TopSample.take(from: host)
        let pause = UInt32(interval * 1_000_000)
        if once {
            usleep(pause)
            print(TopFrame(previous: previous, current: try TopSample.take(from: host)).text, terminator: "")
            return
        }
        show(TopFrame(previous: nil, current: previous))
        while true {
            usleep(pause)
            let current = try TopSample.take(from: host)
            show(TopFrame(previous: previous, current: current))
            previous = current
        }
    }

    /// Home and clear, then the frame, in one write: the terminal keeps one screen, as top's does.
    private func show(_ frame: TopFrame) {
        FileHandle.standardOutput.write(Data(("\u{1B}[H\u{1B}[2J" + frame.text).utf8))
    }
}

/// What one frame is made of: the host's answers at one moment.
struct TopSample {
    var time: ContinuousClock.Instant
    var status: JSON
    var stats: JSON
    var metrics: Exposition

    static func take(from host: HostConnection) throws -> TopSample {
        let time = ContinuousClock.now
        let status = try host.request(["op": "status"])
        let stats = try host.request(["op": "stats"])
        let metrics = Exposition(parsing: try MetricsCommand.text(from: host))
        return TopSample(time: time, status: status, stats: stats, metrics: metrics)
    }
}

/// One screen of `eventbus top`, as text.
struct TopFrame {
    let previous: TopSample?
    let current: TopSample

    private var seconds: Double {
        guard let previous else { return 0 }
        let (whole, atto) = (current.time - previous.time).components
        return Double(whole) + Double(atto) / 1e18
    }

    /// Per second between the two samples; nil for the first frame.
    private func rate(_ now: Double?, _ before: Double?) -> String {
        guard previous != nil, seconds > 0, let now, let before else { return "-" }
        return Self.number(max(0, now - before) / seconds)
    }

    var text: String {
        let status = current.status
        let metrics = current.metrics
        var lines: [String] = []
        let rss = metrics.value("process_resident_memory_bytes").map { String(format: "%.1f MB", $0 / 1_000_000) } ?? "?"
        lines.append("eventbusd pid \(status["pid"]?.intValue ?? 0)   up \(StatusCommand.duration(status["uptime_seconds"]?.doubleValue ?? 0))   rss \(rss)   fds \(Int(metrics.value("process_open_fds") ?? 0))   threads \(Int(metrics.value("process_threads") ?? 0))")
        let posted = metrics.value("eventbus_bus_sequence_total")
        lines.append("events posted \(Int(posted ?? 0))   \(rate(posted, previous?.metrics.value("eventbus_bus_sequence_total")))/s   subscriptions \(status["subscriptions"]?.intValue ?? 0)   control clients \(Int(metrics.value("eventbus_control_clients") ?? 0))")
        lines.append("")
        var modules: [[String]] = [["MODULE", "STATE", "EVENTS/S", "DELIVERED", "QUEUED", "DROPPED", "ERRORS", "P99"]]
        for module in status["modules"]?.arrayValue ?? [] {
            let name = module["name"]?.stringValue ?? "?"
            let labels = ["module": name]
            let delivered = metrics.value("eventbus_module_events_delivered_total", labels)
            modules.append([
                name, module["state"]?.stringValue ?? "?",
                rate(delivered, previous?.metrics.value("eventbus_module_events_delivered_total", labels)),
                Self.count(delivered), Self.count(metrics.value("eventbus_module_mailbox_depth", labels)),
                Self.count(metrics.value("eventbus_module_events_dropped_total", labels)),
                Self.count(metrics.value("eventbus_module_handler_errors_total", labels)),
                p99(labels),
            ])
        }
        lines += Self.table(modules)
        lines.append("")
        var clients: [[String]] = [["CLIENT", "UID", "PID", "EVENTS/S", "DELIVERED", "QUEUED", "DROPPED"]]
        let before = Dictionary((previous?.stats["tailing"]?.arrayValue ?? []).map { ($0["client"]?.intValue ?? -1, $0) },
                                uniquingKeysWith: { first, _ in first })
        for client in current.stats["tailing"]?.arrayValue ?? [] {
            let id = client["client"]?.intValue ?? -1
            let delivered = client["delivered"]?.intValue.map(Double.init)
            clients.append([
                "#\(id)", "\(client["uid"]?.intValue ?? 0)", "\(client["pid"]?.intValue ?? 0)",
                rate(delivered, before[id]?["delivered"]?.intValue.map(Double.init)),
                Self.count(delivered), Self.count(client["queued"]?.intValue.map(Double.init)),
                Self.count(client["dropped"]?.intValue.map(Double.init)),
            ])
        }
        if clients.count == 1 { clients.append(["(no tailing clients)", "", "", "", "", "", ""]) }
        lines += Self.table(clients)
        return lines.joined(separator: "\n") + "\n"
    }

    /// The 99th percentile of the module's handler durations over this frame's interval — or
    /// since start, when no handler ran in it (or in the first frame) — interpolated within its
    /// bucket as Prometheus's `histogram_quantile` does; `-` when no handler ever ran (or the
    /// module's handlers are not timed: a worker's, or plain `sink`s).
    private func p99(_ labels: [String: String]) -> String {
        let name = "eventbus_module_handler_duration_seconds"
        var buckets = current.metrics.buckets(name, labels)
        if let earlier = previous?.metrics.buckets(name, labels), earlier.count == buckets.count,
           let last = buckets.last, let earlierLast = earlier.last, last.count > earlierLast.count {
            for index in buckets.indices { buckets[index].count -= earlier[index].count }
        }
        guard let total = buckets.last?.count, total > 0 else { return "-" }
        let target = 0.99 * total
        var lower = (bound: 0.0, count: 0.0)
        for bucket in buckets {
            if bucket.count >= target {
                guard bucket.bound.isFinite else { return ">" + Self.duration(lower.bound) }
                let share = bucket.count > lower.count ? (target - lower.count) / (bucket.count - lower.count) : 1
                return Self.duration(lower.bound + (bucket.bound - lower.bound) * share)
            }
            lower = bucket
        }
        return "-"
    }

    static func duration(_ seconds: Double) -> String {
        if seconds < 1e-3 { return String(format: "%.0fµs", seconds * 1e6) }
        if seconds < 1 { return String(format: "%.2fms", seconds * 1e3) }
        return String(format: "%.2fs", seconds)
    }

    static func number(_ value: Double) -> String {
        value >= 100 ? String(format: "%.0f", value) : String(format: "%.1f", value)
    }

    static func count(_ value: Double?) -> String {
        value.map { String(Int64($0)) } ?? "-"
    }

    /// Columns padded to their widest cell; the first left-aligned, numbers right-aligned.
    static func table(_ rows: [[String]]) -> [String] {
        let widths = rows[0].indices.map { column in rows.map { $0[column].count }.max() ?? 0 }
        return rows.map { row in
            row.indices.map { column in
                let cell = row[column]
                let padding = String(repeating: " ", count: widths[column] - cell.count)
                return column < 2 ? cell + padding : padding + cell
            }.joined(separator: "  ").trimmingCharacters(in: .whitespaces)
        }
    }
}
