/// Where a module runs: `isolation:` in its config entry.
public enum IsolationMode: String, Sendable, Hashable, CaseIterable {
    /// In a worker process of its own: a crash, a hang or a leak takes down only the worker,
    /// which the host restarts.
    case process
    /// Inside eventbusd: the lowest latency, for trusted modules; a crash ends the host.
    case none
}

/// How the host runs one process-isolated module: `worker:` in its config entry.
public struct WorkerSettings: Sendable, Hashable {
    /// A worker whose module queue has not reported within this long is hung: it is killed
    /// with SIGKILL and restarted (`heartbeat_timeout`).
    public var heartbeatTimeout: Duration = .seconds(10)
    /// The wait before the first restart after a crash; it doubles with each crash within the
    /// start-limit interval, up to ``maximumRestartDelay`` (`restart_delay`).
    public var restartDelay: Duration = .milliseconds(100)
    /// systemd's `StartLimitBurst=`/`StartLimitIntervalSec=`: more than `startLimitBurst`
    /// restarts within `startLimitInterval` and the module is marked failed until a reload
    /// (`start_limit_burst`, `start_limit_interval`).
    public var startLimitBurst: Int = 5
    public var startLimitInterval: Duration = .seconds(10)
    /// `RLIMIT_DATA` in bytes: heap and private mappings (`memory_limit`).
    public var memoryLimit: UInt64?
    /// `RLIMIT_CPU` in seconds of CPU time (`cpu_limit`): past it the kernel sends SIGXCPU,
    /// which ends the worker; a module that ignores it gets SIGKILL 5 CPU seconds later.
    public var cpuLimitSeconds: UInt64?
    /// `RLIMIT_NOFILE` (`open_files`).
    public var openFilesLimit: UInt64?

    public static let maximumRestartDelay = Duration.seconds(30)

    public init() {}
}
