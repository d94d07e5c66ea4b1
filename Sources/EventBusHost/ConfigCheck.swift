import ModuleIsolation
import ModuleLoading

/// `eventbusd --check-config`: validates the config and loads every enabled module far enough to
/// pass the ABI check (the preflight of the file as ELF, then dlopen, entry symbol, export
/// record: `ModuleLoader.load`, as at start and on reload), then checks each module's section
/// against the keys the module declares (``ModuleConfigRefusal``), without activating anything.
///
/// Each module is loaded in a worker process of its own started in check mode (``LoadCheck``),
/// never in this process: loading runs the module's constructors and initializers, and one that
/// crashes or hangs must not end the check with a signal and no report. It is reported by name
/// (`crashed while loading: killed by signal 11 (SIGSEGV)`, `did not finish loading within 30s`)
/// as a problem, and the modules after it are still checked.
///
/// `isolation: none` modules are checked in a worker too, without the `worker:` resource limits
/// (which they do not run under): the load and its checks are the same code in either process,
/// and a load that crashes would take eventbusd itself down at start — saying so beforehand is
/// what the check is for.
public enum ConfigCheck {
    public struct Report: Sendable {
        /// A summary for people, one line each.
        public var lines: [String]
        public var problems: Int
        public var isOK: Bool { problems == 0 }
    }

    /// How long one module's load may take before its worker is killed and the module reported
    /// as hung: as long as a starting host waits for a module.
    public static let defaultLoadTimeout = BusHost.defaultModuleCallTimeout

    public static func run(configPath: String, loadTimeout: Duration = defaultLoadTimeout) -> Report {
        let config: HostConfig
        var lines: [String]
        var problems = 0
        do {
            let (parsed, sectionProblems) = try HostConfig.loadCollecting(from: configPath)
            config = parsed
            if let sectionProblems {
                // The other sections are still checked, the modules loaded: all at one go.
                problems += sectionProblems.all.count
                lines = ["\(sectionProblems)"]
            } else {
                lines = ["config \(config.file): syntax ok"]
            }
        } catch {
            return Report(lines: ["\(error)"], problems: error.all.count)
        }
        lines.append("  module_mailbox_capacity: \(config.moduleMailbox.events), module_mailbox_bytes: \(ByteSizeText.describe(config.moduleMailbox.bytes)), shutdown_timeout: \(config.shutdownTimeout)")
        let control = config.control
        lines.append("  control socket \(control.socketPath): tail \(control.tailGroup.map { "root and group \($0)" } ?? "root only"), post \(control.postGroup.map { "root and group \($0)" } ?? "root only"), client_buffer \(control.clientBuffer), client_buffer_bytes \(ByteSizeText.describe(control.clientBufferBytes)), replay_events \(control.replayEvents), replay_bytes \(ByteSizeText.describe(control.replayBytes)), watch_entries \(control.watchEntries)")
        for timer in config.timers {
            lines.append("  timer \(timer.name): \(timer.schedule)")
        }
        for file in config.ruleFiles { lines.append("  rules file \(file)") }
        for rule in config.rules {
            let patterns = rule.trigger.patterns.map(\.description).joined(separator: ", ")
            let actions = rule.actions.map(\.kind).joined(separator: ", ")
            lines.append("  rule \(rule.name): \(rule.enabled ? "" : "disabled, ")on \(patterns), mode \(rule.mode.name), \(actions) (\(rule.location))")
        }
        for module in config.modules {
            guard module.enabled else {
                lines.append("  module \(module.name): disabled (\(module.path))")
                continue
            }
            let outcome = LoadCheck.run(name: module.name, path: module.path, config: module.config,
                                        settings: module.isolation == .process ? module.worker : WorkerSettings(),
                                        timeout: loadTimeout)
            // What the same load does to a host at start, for a module that would run inside it.
            let inHost = module.isolation == .none
            switch outcome {
            case .answered(.loaded(let resolvedPath, let declaresKeys, let refused, let keysSummary)):
                // The section against the module's declaration: what activation would refuse.
                if let refusal = ModuleConfigRefusal.refusal(refused, keysSummary: keysSummary, at: module.configLocations) {
                    problems += refusal.problems.count
                    lines.append("  module \(module.name): loads, ABI ok, config refused (\(resolvedPath)):")
                    lines += refusal.description.split(separator: "\n").map { "    \($0)" }
                    continue
                }
                let checked = declaresKeys ? "config ok" : "config not checked (the module declares no configKeys)"
                lines.append("  module \(module.name): loads, ABI ok, \(checked) (\(resolvedPath))")
            case .answered(.refused(let reason)):
                problems += 1
                lines.append("  module \(module.name): \(module.location): \(reason)")
            case .ended(let exit):
                problems += 1
                lines.append("  module \(module.name): \(module.location): crashed while loading \(module.path): \(exit)"
                             + (inHost ? "; with isolation: none it takes eventbusd down at start" : ""))
            case .timedOut(let limit):
                problems += 1
                lines.append("  module \(module.name): \(module.location): did not finish loading \(module.path) within \(limit); its check process was killed"
                             + (inHost ? "; with isolation: none it stalls eventbusd's start" : ""))
            case .notChecked(let reason):
                problems += 1
                lines.append("  module \(module.name): \(module.location): not checked: \(reason)")
            }
        }
        lines.append(problems == 0 ? "ok" : "\(problems) problem(s) found")
        return Report(lines: lines, problems: problems)
    }
}
