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
        let status = try socket.ask(["op": "status"])
        if json {
            print(String(decoding: JSONWriter.line(status).dropLast(), as: UTF8.self))
            return
        }
        let uptime = Self.duration(status["uptime_seconds"]?.doubleValue ?? 0)
        print("eventbusd pid \(status["pid"]?.intValue ?? 0), up \(uptime) (since \(status["started"]?.stringValue ?? "?"))")
        print("config:        \(status["config"]?.stringValue ?? "?")")
        print("events posted: \(status["posted"]?.intValue ?? 0)   bus subscriptions: \(status["subscriptions"]?.intValue ?? 0)")
        if let control = status["control"] {
            let replay = control["replay"]
            print("control:       \(control["socket"]?.stringValue ?? "?"), \(control["clients"]?.intValue ?? 0) client(s), \(control["tailing"]?.intValue ?? 0) tailing; replay holds \(replay?["held"]?.intValue ?? 0)/\(replay?["capacity"]?.intValue ?? 0) (#\(replay?["oldest_seq"]?.intValue ?? 0)-#\(replay?["newest_seq"]?.intValue ?? 0))")
            let refusedForLimit = control["refused"]?["limit"]?.intValue ?? 0
            let refusedForDescriptors = control["refused"]?["descriptors"]?.intValue ?? 0
            if refusedForLimit + refusedForDescriptors > 0 {
                print("               refused \(refusedForLimit) connection(s) over a client limit, \(refusedForDescriptors) for want of file descriptors")
            }
        }
        let sources = status["sources"]?.arrayValue ?? []
        print("sources:       \(sources.isEmpty ? "none running" : "")")
        for source in sources {
            print("  \(source["id"]?.stringValue ?? "?")  (\(source["subscriptions"]?.intValue ?? 0) subscription(s))"
                  + (source["state"]?.stringValue.map { "\n    └ \($0)" } ?? ""))
        }
        if let bridge = status["bridge"] { print(Self.bridgeLines(bridge)) }
        let modules = status["modules"]?.arrayValue ?? []
        print("modules:       \(modules.isEmpty ? "none configured" : "")")
        if !modules.isEmpty { print(ModulesCommand.table(modules, indent: "  ")) }
    }

    /// The NATS bridge: state, what crossed, what was lost, the lag.
    static func bridgeLines(_ bridge: JSON) -> String {
        func n(_ key: String) -> Int64 { bridge[key]?.intValue ?? 0 }
        var lines = [
            "bridge:        \(bridge["mode"]?.stringValue ?? "?") NATS as \(bridge["host"]?.stringValue ?? "?"), \(bridge["state"]?.stringValue ?? "?") (\((bridge["servers"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: ", ")))",
            "  exported \(n("exported")) (queued \(n("export_queued")), in flight \(n("export_in_flight")), \(n("export_queued_bytes") / 1024) KiB held)   imported \(n("imported")) (lag \(n("import_lag")))",
            "  lost \(n("lost")) in \(n("gaps")) gap(s)   echoes dropped \(n("echoes_dropped"))   redeliveries dropped \(n("redeliveries_dropped"))   disconnects \(n("disconnects")), reconnects \(n("reconnects"))",
        ]
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
        let response = try socket.ask(["op": "modules"])
        if json {
            print(String(decoding: JSONWriter.line(response).dropLast(), as: UTF8.self))
            return
        }
        let modules = response["modules"]?.arrayValue ?? []
        print(modules.isEmpty ? "no modules configured" : Self.table(modules, indent: ""))
    }

    /// One row per module, columns aligned; a refused module's reason, and a worker's last
    /// crash, on the lines below it.
    static func table(_ modules: [JSON], indent: String) -> String {
        let header = ["NAME", "STATE", "ISOLATION", "RESTARTS", "DELIVERED", "DROPPED", "QUEUED", "ERRORS", "VERSION"]
        var rows = [header]
        var reasons: [Int: String] = [:]
        for module in modules {
            let reported = [module["reported_name"]?.stringValue, module["version"]?.stringValue].compactMap { $0 }
            let isolation = module["isolation"]?.stringValue ?? "none"
            let oldConfig = module["config_not_applied"]?.stringValue
            rows.append([
                module["name"]?.stringValue ?? "?", (module["state"]?.stringValue ?? "?") + (oldConfig == nil ? "" : " (old config)"),
                isolation + (module["pid"]?.intValue.map { " (pid \($0))" } ?? ""),
                "\(module["restarts"]?.intValue ?? 0)",
                "\(module["delivered"]?.intValue ?? 0)", "\(module["dropped"]?.intValue ?? 0)",
                "\(module["queued"]?.intValue ?? 0)", "\(module["errors"]?.intValue ?? 0)",
                reported.isEmpty ? "-" : reported.joined(separator: " "),
            ])
            var notes = [module["reason"]?.stringValue].compactMap { $0 }
            if let oldConfig { notes.append("runs on its previous config; the file's section: \(oldConfig)") }
            if let crash = module["last_crash"]?.stringValue {
                notes.append("last crash\(module["last_crash_time"]?.stringValue.map { " \($0)" } ?? ""): \(crash)")
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
