/// One module, in `status` and `modules`.
public struct ModuleReport: Codable, Equatable, Sendable {
    public var name: String
    public var path: String
    /// `starting`, `active`, `disabled`, `stopped`, `restarting`, `stalled` (an exec module's
    /// program does not read its input) or `failed` (with ``reason``).
    public var state: String
    public var reason: String?
    public var delivered: Int64
    public var dropped: Int64
    public var queued: Int64
    public var queuedBytes: Int64
    public var errors: Int64
    public var reportedName: String?
    public var version: String?
    /// `none`, `process` or `exec` (a program in any language, run as a worker is).
    public var isolation: String
    public var restarts: Int64
    /// The worker's pid, for an isolated module that runs.
    public var workerProcessID: Int64?
    public var lastCrash: String?
    /// RFC 3339.
    public var lastCrashTime: String?
    /// A reloaded config the module refused: it runs on its previous one.
    public var configNotApplied: String?

    public init(name: String, path: String, state: String, reason: String? = nil, delivered: Int64, dropped: Int64,
                queued: Int64, queuedBytes: Int64, errors: Int64, reportedName: String? = nil, version: String? = nil,
                isolation: String, restarts: Int64, workerProcessID: Int64? = nil, lastCrash: String? = nil,
                lastCrashTime: String? = nil, configNotApplied: String? = nil) {
        self.name = name
        self.path = path
        self.state = state
        self.reason = reason
        self.delivered = delivered
        self.dropped = dropped
        self.queued = queued
        self.queuedBytes = queuedBytes
        self.errors = errors
        self.reportedName = reportedName
        self.version = version
        self.isolation = isolation
        self.restarts = restarts
        self.workerProcessID = workerProcessID
        self.lastCrash = lastCrash
        self.lastCrashTime = lastCrashTime
        self.configNotApplied = configNotApplied
    }

    enum CodingKeys: String, CodingKey {
        case name, path, state, reason, delivered, dropped, queued, errors, version, isolation, restarts
        case queuedBytes = "queued_bytes"
        case reportedName = "reported_name"
        case workerProcessID = "pid"
        case lastCrash = "last_crash"
        case lastCrashTime = "last_crash_time"
        case configNotApplied = "config_not_applied"
    }
}
