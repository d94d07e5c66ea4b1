/// One rule, in the answer to `rules`: where it was written, its mode and launcher, its counters
/// and its last run.
public struct RuleReport: Equatable, Sendable {
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

    public var json: JSON {
        var object: [String: JSON] = [
            "name": .string(name), "location": .string(location), "state": .string(state), "mode": .string(mode),
            "launcher": .string(launcher), "fired": .int(fired), "skipped": .int(skipped), "dropped": .int(dropped),
            "runs": .int(runs), "succeeded": .int(succeeded), "failed": .int(failed), "timed_out": .int(timedOut),
            "stopped": .int(stopped), "running": .int(running), "queued": .int(queued),
        ]
        if let reason { object["reason"] = .string(reason) }
        if let lastRunTime { object["last_run_time"] = .string(lastRunTime) }
        if let lastOutcome { object["last_outcome"] = .string(lastOutcome) }
        return .object(object)
    }

    init(_ json: JSON) throws(ResponseDecodingError) {
        let members = try Members(json, type: "rule")
        name = try members.string("name")
        location = members["location"]?.stringValue ?? "?"
        state = members["state"]?.stringValue ?? "?"
        reason = members["reason"]?.stringValue
        mode = members["mode"]?.stringValue ?? "?"
        launcher = members["launcher"]?.stringValue ?? "?"
        fired = members["fired"]?.intValue ?? 0
        skipped = members["skipped"]?.intValue ?? 0
        dropped = members["dropped"]?.intValue ?? 0
        runs = members["runs"]?.intValue ?? 0
        succeeded = members["succeeded"]?.intValue ?? 0
        failed = members["failed"]?.intValue ?? 0
        timedOut = members["timed_out"]?.intValue ?? 0
        stopped = members["stopped"]?.intValue ?? 0
        running = members["running"]?.intValue ?? 0
        queued = members["queued"]?.intValue ?? 0
        lastRunTime = members["last_run_time"]?.stringValue
        lastOutcome = members["last_outcome"]?.stringValue
    }
}

/// The answer to `rules`: every running rule, in config order.
public enum RulesAnswer {
    public static func json(_ rules: [RuleReport]) -> JSON { ["type": "rules", "rules": .array(rules.map(\.json))] }
}
