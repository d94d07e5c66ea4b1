import ArgumentParser
import ControlProtocol

/// `eventbus status`: how the running host is doing.
struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show the running eventbusd: uptime, sources, modules with their counts, clients.")

    @Flag(help: "The host's status response as one JSON object.")
    var json = false

    @OptionGroup var socket: SocketOptions

    func run() throws {
        let answer = try socket.ask(ControlRequest(.status))
        if json {
            print(String(decoding: JSONWriter.line(answer).dropLast(), as: UTF8.self))
            return
        }
        let status = try HostConnection.decode(answer, as: "status") { if case .status(let report) = $0 { report } else { nil } }
        if let stopping = status.stopping { print(Self.stoppingLines(stopping)) }
        print("eventbusd pid \(status.processID), up \(Self.duration(status.uptimeSeconds)) (since \(status.started))\(status.life.map { ", life \($0) (cursors LIFE:SEQ)" } ?? "")")
        print("config:        \(status.configFile)")
        print("events posted: \(status.posted)   bus subscriptions: \(status.subscriptions)")
        let control = status.control
        let replay = control.replay
        print("control:       \(control.socket), \(control.clients) client(s), \(control.tailing) tailing; replay holds \(replay.held)/\(replay.capacity) (#\(replay.oldestSequence)-#\(replay.newestSequence))")
        if control.refused.limit + control.refused.descriptors > 0 {
            print("               refused \(control.refused.limit) connection(s) over a client limit, \(control.refused.descriptors) for want of file descriptors")
        }
        print("sources:       \(status.sources.isEmpty ? "none running" : "")")
        for source in status.sources {
            print("  \(source.id)  (\(source.subscriptions) subscription(s))" + (source.state.map { "\n    └ \($0)" } ?? ""))
        }
        if let bridge = status.bridge { print(Self.bridgeLines(bridge)) }
        print("modules:       \(status.modules.isEmpty ? "none configured" : "")")
        if !status.modules.isEmpty { print(ModulesCommand.table(status.modules, indent: "  ")) }
    }

    /// A host that is shutting down: the step, the budget left, and what it still drains.
    static func stoppingLines(_ stopping: StoppingReport) -> String {
        func seconds(_ value: Double) -> String { "\(Double(Int(value * 10)) / 10) s" }
        let modules = stopping.modules.map { "\($0.name) (\($0.state), \($0.queued) queued)" }
        return [
            "STOPPING:      \(stopping.step.split(separator: "_").joined(separator: " ")); \(seconds(stopping.remainingSeconds)) of its \(seconds(stopping.budgetSeconds)) shutdown budget left",
            "  still to drain: \(modules.isEmpty ? "no module" : "module(s) " + modules.joined(separator: ", ")); \(stopping.ruleRuns) rule run(s); \(stopping.tails) tail(s) with \(stopping.tailQueued) queued event(s)",
        ].joined(separator: "\n")
    }

    /// The NATS bridge: state, what crossed, what was lost, the lag.
    static func bridgeLines(_ bridge: JSON) -> String {
        func n(_ key: String) -> Int64 { bridge[key]?.intValue ?? 0 }
        var lines = [
            "bridge:        \(bridge["mode"]?.stringValue ?? "?") NATS as \(bridge["host"]?.stringValue ?? "?"), \(bridge["state"]?.stringValue ?? "?") (\((bridge["servers"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ", ")))",
            "  exported \(n("exported")) (queued \(n("export_queued")), in flight \(n("export_in_flight")), \(n("export_queued_bytes") / 1024) KiB held)   imported \(n("imported")) (lag \(n("import_lag")))",
            "  lost \(n("lost")) in \(n("gaps")) gap(s), \(n("missed")) of them counted from origins' numbers   echoes dropped \(n("echoes_dropped"))   redeliveries dropped \(n("redeliveries_dropped"))   disconnects \(n("disconnects")), reconnects \(n("reconnects"))",
        ]
        if let overShare = bridge["over_share"]?.objectValue, !overShare.isEmpty {
            let origins = overShare.sorted { $0.key < $1.key }.map { "\($0.key.isEmpty ? "other origins" : $0.key) \($0.value.intValue ?? 0)" }
            lines.append("  dropped over their origin's fair share: \(origins.joined(separator: ", "))")
        }
        if bridge["mode"]?.stringValue == "durable" {
            lines.append("  consumers made again \(n("consumers_remade")) (stalled)   exports published again \(n("export_republished"))   imports unrecorded \(n("import_unrecorded"))")
            lines.append("  put back in their origin's order \(n("reordered"))   posted out of order \(n("out_of_order"))")
        }
        for origin in bridge["origins"]?.arrayValue ?? [] {
            lines.append("  from \(origin["host"]?.stringValue ?? "?"): up to #\(origin["seq"]?.intValue ?? 0) (instance \(origin["instance"]?.intValue ?? 0))")
        }
        if let error = bridge["last_error"]?.stringValue { lines.append("  last error: \(error)") }
        return lines.joined(separator: "\n")
    }

    static func duration(_ seconds: Double) -> String {
        let total = Int(seconds)
        let (days, hours, minutes) = (total / 86_400, total / 3_600 % 24, total / 60 % 60)
        if days > 0 { return "\(days)d \(hours)h \(minutes)m" }
        if hours > 0 { return "\(hours)h \(minutes)m" }
        if minutes > 0 { return "\(minutes)m \(total % 60)s" }
        return "\(Double(Int(seconds * 10)) / 10)s"
    }
}

/// `eventbus modules`: the configured handler modules and their counts.
struct ModulesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "modules",
        abstract: "List the running eventbusd's modules: state, isolation, restarts, delivered, dropped, queued, errors, version; and each worker's last crash.")

    @Flag(help: "The host's modules response as one JSON object.")
    var json = false

    @OptionGroup var socket: SocketOptions

    func run() throws {
        let answer = try socket.ask(ControlRequest(.modules))
        if json {
            print(String(decoding: JSONWriter.line(answer).dropLast(), as: UTF8.self))
            return
        }
        let modules = try HostConnection.decode(answer, as: "modules") { if case .modules(let modules) = $0 { modules } else { nil } }
        print(modules.isEmpty ? "no modules configured" : Self.table(modules, indent: ""))
    }

    /// One row per module, columns aligned; a refused module's reason, and a worker's last
    /// crash, on the lines below it.
    static func table(_ modules: [ModuleReport], indent: String) -> String {
        let header = ["NAME", "STATE", "ISOLATION", "RESTARTS", "DELIVERED", "DROPPED", "QUEUED", "ERRORS", "VERSION"]
        var rows = [header]
        var reasons: [Int: String] = [:]
        for module in modules {
            let reported = [module.reportedName, module.version].compactMap { $0 }
            let oldConfig = module.configNotApplied
            rows.append([
                module.name, module.state + (oldConfig == nil ? "" : " (old config)"),
                module.isolation + (module.workerProcessID.map { " (pid \($0))" } ?? ""),
                "\(module.restarts)", "\(module.delivered)", "\(module.dropped)", "\(module.queued)", "\(module.errors)",
                reported.isEmpty ? "-" : reported.joined(separator: " "),
            ])
            var notes = [module.reason].compactMap { $0 }
            if let oldConfig { notes.append("runs on its previous config; the file's section: \(oldConfig)") }
            if let crash = module.lastCrash {
                notes.append("last crash\(module.lastCrashTime.map { " \($0)" } ?? ""): \(crash)")
            }
            if !notes.isEmpty { reasons[rows.count - 1] = notes.joined(separator: "\n" + indent + "  └ ") }
        }
        let widths = header.indices.map { column in rows.map { $0[column].count }.max()! }
        var lines: [String] = []
        for (index, row) in rows.enumerated() {
            let cells = row.enumerated().map { column, cell in
                column == row.count - 1 ? cell : cell.padding(toLength: widths[column], withPad: " ", startingAt: 0)
            }
            lines.append(indent + cells.joined(separator: "  "))
            if let reason = reasons[index] { lines.append(indent + "  └ " + reason) }
        }
        return lines.joined(separator: "\n")
    }
}
