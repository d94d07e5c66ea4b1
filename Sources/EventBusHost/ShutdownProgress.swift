import Synchronization

/// Where a running shutdown stands: its budget and the step it is at. The control server
/// reports it, with what is left to drain, to `status` and `stats` asked meanwhile
/// (``StoppingReport``), so a stopping host says so instead of seeming gone.
///
/// ## Threads
/// Made and advanced by ``BusHost/shutdown(progress:)`` on the host's control queue; read by
/// the control server's reports on its loop.
final class ShutdownProgress: Sendable {
    /// The steps of ``BusHost/shutdown(progress:)``, in order; the raw value is the report's `step`.
    enum Step: String, Sendable {
        /// Posts are refused; the acknowledged ones are handed to modules and tails.
        case deliveringPosts = "delivering_posts"
        /// The bridge, timers and watches stop; rule runs are stopped and waited for.
        case stoppingRules = "stopping_rules"
        /// Every module handles what its mailbox holds, then deactivates.
        case drainingModules = "draining_modules"
        /// Each tail gets what its buffer holds, then `end`.
        case endingStreams = "ending_streams"
    }

    let budget: Duration
    let deadline: ContinuousClock.Instant
    private let current = Mutex(Step.deliveringPosts)

    init(budget: Duration) {
        self.budget = budget
        deadline = .now + budget
    }

    var step: Step { current.withLock { $0 } }

    func advance(to step: Step) {
        current.withLock { $0 = step }
    }

    /// What is left of the budget (zero once it is spent).
    var remaining: Duration { max(.zero, deadline - .now) }
}
