/// What a host that is shutting down still has to do, in the `status` and `stats` answers it
/// gives meanwhile (their `"state": "stopping"`): the step its shutdown is at, the budget
/// (`shutdown_timeout`) and what is left of it, and what still drains.
///
/// Why a stopping host answers at all: a shutdown can take its whole budget (a module working
/// through its mailbox, a rule run that ends slowly), and a host that answered nothing then
/// looked gone. `status` asked meanwhile says it stops and what it waits for.
public struct StoppingReport: Codable, Equatable, Sendable {
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
    public struct Module: Codable, Equatable, Sendable {
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

    enum CodingKeys: String, CodingKey {
        case step, modules, tails
        case budgetSeconds = "budget_seconds"
        case remainingSeconds = "remaining_seconds"
        case ruleRuns = "rule_runs"
        case tailQueued = "tail_queued"
    }
}
