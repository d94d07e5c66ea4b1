/// One rule, in the answer to `rules`: where it was written, its mode and launcher, its counters
/// and its last run.
public struct RuleReport: Codable, Equatable, Sendable {
    public var name: String
    /// `file:line`.
    public var location: String
    /// `active`, or `failed` with ``reason``.
    public var state: String
    public var reason: String?
    public var mode: String
    /// `systemd` or `process`.
    public var launcher: String
    public var fired: Int64
    public var skipped: Int64
    public var dropped: Int64
    public var runs: Int64
    public var succeeded: Int64
    public var failed: Int64
    public var timedOut: Int64
    public var stopped: Int64
    public var running: Int64
    public var queued: Int64
    /// RFC 3339, when the last run ended.
    public var lastRunTime: String?
    /// `success`, `exit 3`, `signal 9`, `timeout`, `stopped`, `failed`.
    public var lastOutcome: String?

    public init(name: String, location: String, state: String, reason: String? = nil, mode: String, launcher: String,
                fired: Int64 = 0, skipped: Int64 = 0, dropped: Int64 = 0, runs: Int64 = 0, succeeded: Int64 = 0,
                failed: Int64 = 0, timedOut: Int64 = 0, stopped: Int64 = 0, running: Int64 = 0, queued: Int64 = 0,
                lastRunTime: String? = nil, lastOutcome: String? = nil) {
        self.name = name
        self.location = location
        self.state = state
        self.reason = reason
        self.mode = mode
        self.launcher = launcher
        self.fired = fired
        self.skipped = skipped
        self.dropped = dropped
        self.runs = runs
        self.succeeded = succeeded
        self.failed = failed
        self.timedOut = timedOut
        self.stopped = stopped
        self.running = running
        self.queued = queued
        self.lastRunTime = lastRunTime
        self.lastOutcome = lastOutcome
    }

    enum CodingKeys: String, CodingKey {
        case name, location, state, reason, mode, launcher, fired, skipped, dropped, runs, succeeded, failed, stopped, running, queued
        case timedOut = "timed_out"
        case lastRunTime = "last_run_time"
        case lastOutcome = "last_outcome"
    }
}

/// The answer to `rules`: every running rule, in config order.
public struct RulesAnswer: CodableAnswer, Equatable {
    public static let type = "rules"
    public var rules: [RuleReport]

    public init(rules: [RuleReport]) {
        self.rules = rules
    }
}
