/// `eventbusd --check-config`: validates the config and loads every enabled module far enough to
/// pass the ABI check (the preflight of the file as ELF, then dlopen, entry symbol, export
/// record: `ModuleLoader.load`, as at start and on reload), then checks each module's section
/// against the keys the module declares (``ModuleConfigRefusal``), without activating anything.
public enum ConfigCheck {
    public struct Report: Sendable {
        /// A summary for people, one line each.
        public var lines: [String]
        public var problems: Int
        public var isOK: Bool { problems == 0 }
    }

    public static func run(configPath: String, loader: ModuleLoader = ModuleLoader()) -> Report {
        let config: HostConfig
        do {
            config = try HostConfig.load(from: configPath)
        } catch {
            return Report(lines: ["\(error)"], problems: 1)
        }
        var lines = ["config \(config.file): syntax ok"]
        var problems = 0
        lines.append("  module_mailbox_capacity: \(config.moduleMailboxCapacity), shutdown_timeout: \(config.shutdownTimeout)")
        let control = config.control
        lines.append("  control socket \(control.socketPath): tail \(control.tailGroup.map { "root and group \($0)" } ?? "root only"), post \(control.postGroup.map { "root and group \($0)" } ?? "root only"), client_buffer \(control.clientBuffer), replay_events \(control.replayEvents)")
        for timer in config.timers {
            lines.append("  timer \(timer.name): \(timer.schedule)")
        }
        for module in config.modules {
            guard module.enabled else {
                lines.append("  module \(module.name): disabled (\(module.path))")
                continue
            }
            do {
                let library = try loader.load(module.path)
                // The section against the module's declaration: what activation would refuse.
                if let refusal = ModuleConfigRefusal.check(module.config, keys: library.configKeys, at: module.configLocations) {
                    problems += refusal.problems.count
                    lines.append("  module \(module.name): loads, ABI ok, config refused (\(library.resolvedPath)):")
                    lines += refusal.description.split(separator: "\n").map { "    \($0)" }
                    continue
                }
                let checked = library.configKeys.isDeclared ? "config ok" : "config not checked (the module declares no configKeys)"
                lines.append("  module \(module.name): loads, ABI ok, \(checked) (\(library.resolvedPath))")
            } catch {
                problems += 1
                lines.append("  module \(module.name): \(module.location): \(error)")
            }
        }
        lines.append(problems == 0 ? "ok" : "\(problems) problem(s) found")
        return Report(lines: lines, problems: problems)
    }
}
