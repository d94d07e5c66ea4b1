@_spi(EventBusHost) import EventBusKit
import Dispatch
import Logging
import SystemCalls

/// The host's own consumer of a config journal watch that names a `consumer`: it acknowledges
/// the entries it posted, so a restarted host resumes right after them — the promise of
/// `consumer:` in `sources.journal`.
///
/// Why after posting and not after handling: the host cannot know when every module is done
/// with an event, and modules that need that promise acknowledge themselves (a module
/// acknowledging the same consumer only moves the position further).
///
/// Why ``settleTime`` late, and only once every tail has it: an entry is saved only once it has
/// been on the bus that long and every control-socket tail has been handed it
/// (`Bus.hasHandedOut(through:)`; a tail that stops reading holds it back at most
/// `Bus.handOutPatience`, `control.hand_out_patience`), or at a graceful stop. A host that dies — SIGKILL, or the watchdog's
/// SIGABRT, which comes with a SIGCONT that lets a frozen host's reader post a last batch while
/// the crash report is written — takes what it posted in its last moment with it, and what a
/// tail that fell behind had not been handed yet; those entries are then read again by the next
/// host instead of being lost. So across a crash the watch delivers at least once (at most the
/// last ``settleTime`` — more while a tail lags — twice, to a process that never saw them), and
/// exactly once across stops and restarts.
///
/// Each acknowledgement is a durable write (fsync), so they are coalesced: the bus's delivery
/// loop records what arrives (the newest entry per ``bucket``), and one serial queue writes the
/// newest settled position, rescheduling itself only while something waits (idle: no timer).
///
/// Threads: ``receive(_:)`` on the bus's delivery loop; writes on ``queue``.
final class JournalWatchAcknowledger: @unchecked Sendable {
    static let settleTime = Duration.milliseconds(250)
    /// Entries posted within one bucket are one candidate position: the list stays short.
    private static let bucket = Duration.milliseconds(25)
    /// How often a settled entry is checked again while a tail has not been handed it.
    private static let handOutPoll = Duration.milliseconds(50)

    private let bus: Bus
    private let watch: String
    private let logger: Logger
    private let queue: DispatchQueue
    private struct State {
        /// Newest last; at most one per ``bucket``. `sequence`: the bus's number of its event.
        var pending: [(entry: JournalEntry, sequence: UInt64, posted: ContinuousClock.Instant)] = []
        var scheduled = false
        var closed = false
    }
    private let state = Locked(State())
    private var failureLog = RateLimitedLog(interval: .seconds(60))  // on `queue`

    init(bus: Bus, watch: String, logger: Logger) {
        self.bus = bus
        self.watch = watch
        self.logger = logger
        self.queue = DispatchQueue(label: "eventbus.journal-ack.\(watch)")
    }

    func receive(_ event: Event) {
        guard let entry = event.journalEntry else { return }  // journal.status, journal.gap
        let now = ContinuousClock.now
        let schedule = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            if let last = state.pending.last, now - last.posted < Self.bucket {
                state.pending[state.pending.count - 1].entry = entry
                state.pending[state.pending.count - 1].sequence = event.sequence
            } else {
                state.pending.append((entry, event.sequence, now))
            }
            defer { state.scheduled = true }
            return !state.scheduled
        }
        if schedule { scheduleWrite(after: Self.settleTime) }
    }

    /// Takes no more entries: what arrives from now on is delivered again after a restart.
    func close() {
        state.withLock { $0.closed = true }
    }

    /// Writes the newest entry taken, settled or not (a graceful stop: it reached the bus's
    /// subscribers); waits for a write in progress.
    func finish() {
        queue.sync { _ = writeNewest(settledFor: .zero, waitForTails: false) }
    }

    private func scheduleWrite(after delay: Duration) {
        queue.asyncAfter(deadline: .now() + DispatchTimeInterval(delay)) { [self] in
            let waiting = writeNewest(settledFor: Self.settleTime, waitForTails: true)
            let next = state.withLock { state -> ContinuousClock.Instant? in
                guard let oldest = state.pending.first else {
                    state.scheduled = false
                    return nil
                }
                return oldest.posted
            }
            if let next { scheduleWrite(after: waiting ? Self.handOutPoll : max(.milliseconds(1), next + Self.settleTime - .now)) }
        }
    }

    /// On ``queue``: saves the newest entry posted `settle` ago or more — with `waitForTails`,
    /// the newest of those every tail has been handed or that waited `Bus.handOutPatience`
    /// (`Bus.savablePosition`) — and forgets it and older ones. Returns whether a settled entry
    /// still waits for a tail.
    private func writeNewest(settledFor settle: Duration, waitForTails: Bool) -> Bool {
        // Copied out: the check takes the control server's locks, not to be taken under this one.
        let pending = state.withLock { $0.pending }
        let (settled, savable) = Bus.savablePosition(
            count: pending.count, now: .now, settle: settle, patience: bus.handOutPatience, posted: { pending[$0].posted }, sequence: { pending[$0].sequence },
            handedOut: { waitForTails ? bus.hasHandedOut(through: $0) : true })
        let waiting = settled != savable
        guard let index = savable else { return waiting }
        let entry = pending[index].entry
        // Only the last entry changes meanwhile (its bucket is open), never a settled one.
        state.withLock { state in state.pending.removeFirst(index + 1) }
        // A crashing host saves no position it took in while dying.
        guard !FatalSignals.processIsEnding.load(ordering: .sequentiallyConsistent) else { return waiting }
        do {
            try bus.acknowledge(entry)
        } catch {
            if let more = failureLog.record() {
                logger.error("journal watch \(watch): cannot save its position: \(error)\(more)")
            }
        }
        return waiting
    }
}
