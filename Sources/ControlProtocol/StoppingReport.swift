/// What a host that is shutting down still has to do, in the `status` and `stats` answers it
/// gives meanwhile (their `"state": "stopping"`): the step its shutdown is at, the budget
/// (`shutdown_timeout`) and what is left of it, and what still drains.
///
/// Why a stopping host answers at all: a shutdown can take its whole budget (a module working
/// through its mailbox, a rule run that ends slowly), and a host that answered nothing then
/// looked gone. `status` asked meanwhile says it stops and what it waits for.
public struct StoppingReport: Equatable, Sendable {
    /// `delivering_posts` (acknowledged posts reach modules and tails), `stopping_rules` (timers,
    /// watches and the bridge stop; rule runs end), `draining_modules` (each module handles what
    /// its mailbox holds, then deactivates) or `ending_streams` (tails get what they are owed,
    /// then `end`).
    public var step: String
    public var budgetSeconds: Double
    public var remainingSeconds: Double
    /// The modules not stopped yet, in config order.
    public var modules: [Module]
    /// Rule runs that have not ended.
    public var ruleRuns: Int64
    /// Subscribed clients whose streams have not ended, and the events waiting in their buffers.
    public var tails: Int64
    public var tailQueued: Int64

    /// A module still draining or deactivating: its state and what its mailbox holds.
    public struct Module: Equatable, Sendable {
        public var name: String
        public var state: String
        public var queued: Int64

        public init(name: String, state: String, queued: Int64) {
            self.name = name
            self.state = state
            self.queued = queued
        }
    }

    public init(step: String, budgetSeconds: Double, remainingSeconds: Double, modules: [Module], ruleRuns: Int64,
                tails: Int64, tailQueued: Int64) {
        self.step = step
        self.budgetSeconds = budgetSeconds
        self.remainingSeconds = remainingSeconds
        self.modules = modules
        self.ruleRuns = ruleRuns
        self.tails = tails
        self.tailQueued = tailQueued
    }

    /// The `state` member of a `status` or `stats` answer: `stopping` with a report, else `running`.
    static func state(_ report: StoppingReport?) -> JSON { report == nil ? "running" : "stopping" }

    public var json: JSON {
        [
            "step": .string(step), "budget_seconds": .double(budgetSeconds), "remaining_seconds": .double(remainingSeconds),
            "modules": .array(modules.map { ["name": .string($0.name), "state": .string($0.state), "queued": .int($0.queued)] }),
            "rule_runs": .int(ruleRuns), "tails": .int(tails), "tail_queued": .int(tailQueued),
        ]
    }

    /// The report of an answer whose `state` is `stopping`; nil for a running host (or one older
    /// than this member).
    init?(_ members: Members) {
        guard members["state"]?.stringValue == "stopping" else { return nil }
        let report = members["stopping"]
        func number(_ value: JSON?) -> Int64 { value?.intValue ?? 0 }
        step = report?["step"]?.stringValue ?? "?"
        budgetSeconds = report?["budget_seconds"]?.doubleValue ?? 0
        remainingSeconds = report?["remaining_seconds"]?.doubleValue ?? 0
        modules = (report?["modules"]?.arrayValue ?? []).map { module in
            Module(name: module["name"]?.stringValue ?? "?", state: module["state"]?.stringValue ?? "?", queued: number(module["queued"]))
        }
        ruleRuns = number(report?["rule_runs"])
        tails = number(report?["tails"])
        tailQueued = number(report?["tail_queued"])
    }
}
