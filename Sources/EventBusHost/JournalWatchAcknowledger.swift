@_spi(EventBusHost) import EventBusKit
import Dispatch
import Logging

/// The host's own consumer of a config journal watch that names a `consumer`: it acknowledges
/// every entry once the bus has taken it, so a restarted host resumes right after the last entry
/// it posted — the promise of `consumer:` in `sources.journal`.
///
/// Why after posting and not after handling: the host cannot know when every module is done with
/// an event, and modules that need that promise acknowledge themselves (a module acknowledging
/// the same consumer only moves the position further). What the bus holds unhandled in mailboxes
/// at a SIGKILL is lost like any event; the journal lines themselves are not.
///
/// Each acknowledgement is a durable write (fsync), so they are coalesced: the bus's delivery
/// loop only records the newest entry, and one serial queue writes the newest position whenever
/// the previous write has finished. When the watch stops, ``close()`` then ``finish()`` write
/// what was taken before the host leaves the source; an entry posted between the two (a burst
/// in flight at that instant) is delivered again after the restart rather than lost.
///
/// Threads: ``receive(_:)`` on the bus's delivery loop; writes on ``queue``.
final class JournalWatchAcknowledger: @unchecked Sendable {
    private let bus: Bus
    private let watch: String
    private let logger: Logger
    private let queue: DispatchQueue
    private let pending = Locked<(entry: JournalEntry?, scheduled: Bool, closed: Bool)>((nil, false, false))
    private var failureLog = RateLimitedLog(interval: .seconds(60))  // on `queue`

    init(bus: Bus, watch: String, logger: Logger) {
        self.bus = bus
        self.watch = watch
        self.logger = logger
        self.queue = DispatchQueue(label: "eventbus.journal-ack.\(watch)")
    }

    func receive(_ event: Event) {
        guard let entry = event.journalEntry else { return }  // journal.status, journal.gap
        let schedule = pending.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.entry = entry
            defer { state.scheduled = true }
            return !state.scheduled
        }
        if schedule { queue.async { self.writeNewest() } }
    }

    /// Takes no more entries: what arrives from now on is delivered again after a restart.
    func close() {
        pending.withLock { $0.closed = true }
    }

    /// Writes the newest entry not yet written; waits for a write in progress.
    func finish() {
        queue.sync { writeNewest() }
    }

    private func writeNewest() {
        guard let entry = pending.withLock({ state -> JournalEntry? in
            defer { state.entry = nil; state.scheduled = false }
            return state.entry
        }) else { return }
        // A crashing host (a SIGABRT from the watchdog included) saves no position it took in
        // while dying: those entries may never have reached anyone.
        guard !FatalSignals.processIsEnding.load(ordering: .sequentiallyConsistent) else { return }
        do {
            try bus.acknowledge(entry)
        } catch {
            if let more = failureLog.record() {
                logger.error("journal watch \(watch): cannot save its position: \(error)\(more)")
            }
        }
    }
}
