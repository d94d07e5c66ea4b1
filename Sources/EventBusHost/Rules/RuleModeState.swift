/// What a rule's mode decides, as a pure state machine: given triggers and ended runs, which
/// runs start, which are stopped and which triggers are skipped. The ``RuleRunner`` carries the
/// decisions out on the rule's queue; everything here is testable without a bus or a process.
///
/// Modes follow Home Assistant's automations:
/// - `single`: one run; a trigger while it runs is skipped (``SkipReason/running``).
/// - `restart`: a trigger while a run is under way stops it; the newest trigger starts once the
///   stopped run has ended (never two at once, as `entr -r` does it). A trigger that is
///   overtaken by a newer one while it waits is skipped (``SkipReason/superseded``).
/// - `queued(max)`: runs one after another; at most `max` triggers wait, more are skipped
///   (``SkipReason/queueFull``).
/// - `parallel(max)`: at most `max` runs at once; more are skipped (``SkipReason/atMaximum``).
struct RuleModeState<Trigger> {
    enum Decision {
        case start(Trigger, run: UInt64)
        case stop(run: UInt64)
        case skip(Trigger, SkipReason)
    }

    enum SkipReason: String, Equatable {
        case running = "already running"
        case superseded = "superseded by a newer trigger"
        case queueFull = "queue full"
        case atMaximum = "at its maximum of parallel runs"
        case retired = "rule removed or changed"
    }

    let mode: RuleMode
    /// Runs under way, oldest first.
    private(set) var running: [UInt64] = []
    /// `queued`: triggers waiting for their turn, oldest first; `restart`: at most the newest.
    private(set) var waiting: [Trigger] = []
    /// `restart`: the stop already asked of the running run.
    private var stopAsked = false
    private var lastRun: UInt64
    private var isRetired = false

    init(mode: RuleMode, firstRun: UInt64 = 1) {
        self.mode = mode
        self.lastRun = firstRun - 1
    }

    private mutating func start(_ trigger: Trigger) -> Decision {
        lastRun += 1
        running.append(lastRun)
        return .start(trigger, run: lastRun)
    }

    mutating func trigger(_ trigger: Trigger) -> [Decision] {
        guard !isRetired else { return [.skip(trigger, .retired)] }
        switch mode {
        case .single:
            return running.isEmpty ? [start(trigger)] : [.skip(trigger, .running)]
        case .parallel(let max):
            return running.count < max ? [start(trigger)] : [.skip(trigger, .atMaximum)]
        case .queued(let max):
            if running.isEmpty && waiting.isEmpty { return [start(trigger)] }
            guard waiting.count < max else { return [.skip(trigger, .queueFull)] }
            waiting.append(trigger)
            return []
        case .restart:
            guard let current = running.first else { return [start(trigger)] }
            var decisions: [Decision] = waiting.map { .skip($0, .superseded) }
            waiting = [trigger]
            if !stopAsked {
                stopAsked = true
                decisions.append(.stop(run: current))
            }
            return decisions
        }
    }

    /// `run` has ended (whatever its outcome): what starts next.
    mutating func finished(_ run: UInt64) -> [Decision] {
        running.removeAll { $0 == run }
        switch mode {
        case .queued, .restart:
            guard running.isEmpty, !waiting.isEmpty else { return [] }
            stopAsked = false
            return [start(waiting.removeFirst())]
        case .single, .parallel:
            return []
        }
    }

    /// The rule is gone (removed, changed or disabled by a reload, or the host stops): waiting
    /// triggers are skipped and no new run starts. Runs under way are left to end.
    mutating func retire() -> [Decision] {
        isRetired = true
        defer { waiting.removeAll() }
        return waiting.map { .skip($0, .retired) }
    }

    /// Triggers waiting for a run.
    var queued: Int { waiting.count }
}
