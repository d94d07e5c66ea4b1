import ArgumentParser
import ControlProtocol
import Foundation
import SystemCalls

/// `eventbus top`: a live view of the running host, like `systemd-cgtop` — modules and control
/// clients with their rates, queue depths, drops and handler p99, refreshed each second.
///
/// Built on the control socket's `stats` answer with `detail` (numbers, not Prometheus text), one
/// per frame on one connection; rates and the p99 are over the interval between two frames.
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
        let pause = Duration.seconds(interval)
        if once {
            System.sleep(for: pause)
            print(TopFrame(previous: previous, current: try TopSample.take(from: host)).text, terminator: "")
            return
        }
        show(TopFrame(previous: nil, current: previous))
        while true {
            System.sleep(for: pause)
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

/// What one frame is made of: the host's `stats` answer (with `detail`) at one moment.
struct TopSample {
    var time: ContinuousClock.Instant
    var stats: StatsReport

    static func take(from host: HostConnection) throws -> TopSample {
        let time = ContinuousClock.now
        let answer = try host.request(ControlRequest(.stats(detail: true)))
        let stats = try HostConnection.decode(answer, as: "stats") { if case .stats(let report) = $0 { report } else { nil } }
        return TopSample(time: time, stats: stats)
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
    private func rate(_ now: Int64?, _ before: Int64?) -> String {
        guard previous != nil, seconds > 0, let now, let before else { return "-" }
        return Self.number(Double(max(0, now - before)) / seconds)
    }

    var text: String {
        let stats = current.stats
        var lines: [String] = []
        let rss = stats.process.map { String(format: "%.1f MB", Double($0.residentBytes) / 1_000_000) } ?? "?"
        lines.append("eventbusd pid \(stats.processID)   up \(StatusCommand.duration(stats.uptimeSeconds))   rss \(rss)   fds \(stats.process?.openFiles ?? 0)   threads \(stats.process?.threads ?? 0)")
        lines.append("events posted \(stats.posted)   \(rate(stats.posted, previous?.stats.posted))/s   subscriptions \(stats.subscriptions)   control clients \(stats.clients)")
        if let stopping = stats.stopping { lines.append(StatusCommand.stoppingLines(stopping)) }
        lines.append("")
        var modules: [[String]] = [["MODULE", "STATE", "EVENTS/S", "DELIVERED", "QUEUED", "DROPPED", "ERRORS", "P99"]]
        let modulesBefore = Dictionary((previous?.stats.modules ?? []).map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        for module in stats.modules {
            let before = modulesBefore[module.name]
            modules.append([
                module.name, module.state, rate(module.delivered, before?.delivered),
                "\(module.delivered)", "\(module.queued)", "\(module.dropped)", "\(module.errors)",
                p99(module.handlerSeconds, before: before?.handlerSeconds),
            ])
        }
        lines += Self.table(modules)
        lines.append("")
        var clients: [[String]] = [["CLIENT", "UID", "PID", "EVENTS/S", "DELIVERED", "QUEUED", "DROPPED"]]
        let clientsBefore = Dictionary((previous?.stats.tailing ?? []).map { ($0.client, $0) }, uniquingKeysWith: { first, _ in first })
        for client in stats.tailing {
            clients.append([
                "#\(client.client)", "\(client.userID)", "\(client.processID)",
                rate(client.delivered, clientsBefore[client.client]?.delivered),
                "\(client.delivered)", "\(client.queued)", "\(client.dropped)",
            ])
        }
        if clients.count == 1 { clients.append(["(no tailing clients)", "", "", "", "", "", ""]) }
        lines += Self.table(clients)
        return lines.joined(separator: "\n") + "\n"
    }

    /// The 99th percentile of the module's handler durations over this frame's interval — or
    /// since start, when no handler ran in it (or in the first frame); `-` when no handler ever
    /// ran (or the module's handlers are not timed: a worker's, or plain `sink`s).
    private func p99(_ histogram: StatsReport.Histogram?, before: StatsReport.Histogram?) -> String {
        guard var histogram else { return "-" }
        if let before, let now = histogram.counts.last, let then = before.counts.last, now > then {
            histogram = histogram.since(before)
        }
        switch histogram.quantile(0.99) {
        case .value(let seconds)?: return Self.duration(seconds)
        case .above(let bound)?: return ">" + Self.duration(bound)
        case nil: return "-"
        }
    }

    static func duration(_ seconds: Double) -> String {
        if seconds < 1e-3 { return String(format: "%.0fµs", seconds * 1e6) }
        if seconds < 1 { return String(format: "%.2fms", seconds * 1e3) }
        return String(format: "%.2fs", seconds)
    }

    static func number(_ value: Double) -> String {
        value >= 100 ? String(format: "%.0f", value) : String(format: "%.1f", value)
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
