/// The pure decision a timer makes each time it wakes: fire or not, for which slot, how many
/// runs were missed, and which slot to arm next. Kept apart from the clocks so it is tested
/// exactly (no sleeping), for interval slots (monotonic nanoseconds) and calendar slots (dates).
struct MissedRunPlanner<Instant: Comparable> {
    struct Decision: Equatable {
        /// The slot this wake-up fires for; nil when it does not fire (woke early, or skipping).
        var firedSlot: Instant?
        /// Runs missed before this tick (only meaningful when it fires).
        var missedRuns: Int
        /// The slot to arm next; nil when the schedule has no more.
        var nextSlot: Instant?
    }

    let policy: MissedRunPolicy
    /// Gives the first slot strictly after an instant.
    let slot: (_ after: Instant) -> Instant?
    /// Runs skipped so far and not yet reported (policy `.skip`).
    private(set) var unreported = 0
    /// Bound on how many overdue slots are counted one by one (a calendar with per-second slots
    /// after a week of suspend would otherwise count 600 000 of them).
    static var countLimit: Int { 100_000 }

    init(policy: MissedRunPolicy, slot: @escaping (_ after: Instant) -> Instant?) {
        self.policy = policy
        self.slot = slot
    }

    /// The timer armed for `armed` woke at `now`.
    mutating func wake(armed: Instant, now: Instant) -> Decision {
        guard now >= armed else {
            // Early (a wall clock set back): keep waiting for the same slot.
            return Decision(firedSlot: nil, missedRuns: 0, nextSlot: armed)
        }
        var latestDue = armed
        var overdue = 0
        var next = slot(armed)
        while let candidate = next, candidate <= now, overdue < Self.countLimit {
            latestDue = candidate
            overdue += 1
            next = slot(candidate)
        }
        while let candidate = next, candidate <= now { next = slot(candidate) }  // past the count limit

        if overdue == 0 {
            defer { unreported = 0 }
            return Decision(firedSlot: armed, missedRuns: unreported, nextSlot: next)
        }
        switch policy {
        case .fireOnce:
            defer { unreported = 0 }
            return Decision(firedSlot: latestDue, missedRuns: unreported + overdue, nextSlot: next)
        case .skip:
            unreported += overdue + 1
            return Decision(firedSlot: nil, missedRuns: 0, nextSlot: next)
        }
    }
}
