import ModuleIsolation

/// The isolation keys of a module entry: `isolation: process | none` and its `worker:` section
/// (see `examples/eventbus.yaml` and `docs/modules.md`), and the host-wide `module_isolation`.
///
/// Why `process` is the default: a module is code the host operator did not necessarily write,
/// and in-process one `fatalError`, force-unwrap or stuck loop ends every module, tail and watch
/// of the host. In a worker it costs one process per module and some tens of microseconds per
/// event (see the isolation benchmark) and the host carries on, restarting the module. Modules
/// that need the lowest latency and are trusted say `isolation: none`.
extension HostConfig {
    public static let defaultIsolation = IsolationMode.process

    static func parseIsolation(_ node: ConfigNode) throws(ConfigError) -> IsolationMode {
        let text = try node.string()
        guard let mode = IsolationMode(rawValue: text) else {
            throw node.error("expected one of: \(IsolationMode.allCases.map(\.rawValue).joined(separator: ", ")), found \"\(text)\"")
        }
        return mode
    }

    /// `worker: {heartbeat_timeout, restart_delay, start_limit_burst, start_limit_interval,
    /// memory_limit, cpu_limit, open_files}`.
    static func parseWorker(_ node: ConfigNode) throws(ConfigError) -> WorkerSettings {
        var settings = WorkerSettings()
        for (key, value) in try node.mapping(allowed: ["heartbeat_timeout", "restart_delay", "start_limit_burst",
                                                       "start_limit_interval", "memory_limit", "cpu_limit", "open_files"]) {
            switch key {
            case "heartbeat_timeout":
                settings.heartbeatTimeout = try value.duration()
                guard settings.heartbeatTimeout >= .milliseconds(100) else { throw value.error("must be at least 100ms") }
            case "restart_delay":
                settings.restartDelay = try value.duration()
                guard settings.restartDelay <= WorkerSettings.maximumRestartDelay else {
                    throw value.error("must be at most \(WorkerSettings.maximumRestartDelay) (the longest wait between restarts)")
                }
            case "start_limit_burst": settings.startLimitBurst = try value.int(atLeast: 0)
            case "start_limit_interval": settings.startLimitInterval = try value.duration()
            case "memory_limit":
                // At least 64 MiB: a worker runs the Swift runtime too.
                settings.memoryLimit = UInt64(try value.byteSize(atLeast: 64 << 20))
            case "cpu_limit":
                let limit = try value.duration()
                guard limit >= .seconds(1) else { throw value.error("must be at least 1s (RLIMIT_CPU counts whole seconds)") }
                settings.cpuLimitSeconds = UInt64(limit.components.seconds)
            case "open_files":
                let files = try value.int(atLeast: 16)
                settings.openFilesLimit = UInt64(files)
            default: preconditionFailure("key \(key) allowed but not handled")
            }
        }
        return settings
    }
}
