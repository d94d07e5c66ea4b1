@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import Synchronization

/// Writes the durable import position (``ImportLedger``) once the batches it covers have
/// settled (``ImportSettling``), on a serial queue of its own — whatever the importer thread is
/// doing meanwhile.
///
/// Why not on the importer thread: that thread waits on the connection — for a server that is
/// away (an outage of seconds), for the JetStream API while it binds its consumer again (up to
/// a few seconds per request around a server's death), for a fetch. A position written only
/// between those waits left what the host took in before an outage unrecorded for the whole
/// outage, and a SIGKILL 6 s into one posted again events imported 6–7 s earlier. Here, what
/// settles is written within ``writeGap`` of settling, connected or not: a SIGKILL posts again
/// at most the last ``ImportSettling/settleTime`` + ``writeGap`` of imports (more only while a
/// tail lags, up to `Bus.handOutPatience`).
///
/// Threads: ``queue(total:recordable:recordableTotal:sequence:)`` and ``lastQueued`` are called
/// on the importer thread; the writes happen on the recorder queue (`eventbus.bridge.position`),
/// including ``recordAll()`` and ``replace(with:)``, which the importer thread waits for. The
/// shared state is behind one lock, never held across a write.
final class PositionRecorder: Sendable {
    /// The least time between two writes (each is three fsyncs): at full speed a batch settles
    /// every few milliseconds, and writing each one would cost the disk a write per batch.
    static let writeGap = Duration.milliseconds(50)

    private struct State {
        var settling = ImportSettling()
        /// What the file holds.
        var recorded: ImportLedger
        /// Events the importer has posted, and how many of them the file covers: the difference
        /// is `import_unrecorded`.
        var posted: UInt64 = 0
        var recordedCount: UInt64 = 0
        /// Whether a check is scheduled on the queue (one runs every ``writeGap`` while batches wait).
        var scheduled = false
        /// Whether the last write failed (logged once until one succeeds).
        var failing = false
    }

    private let state: Mutex<State>
    private let queue = DispatchQueue(label: "eventbus.bridge.position")
    private let file: StateFile
    private let bus: Bus
    private let counters: BridgeCounters
    private let logger: Logger
    /// Why the last write failed, until one succeeds (status shows it).
    let lastError = Mutex<String?>(nil)

    /// `recorded`: what `file` holds now.
    init(file: StateFile, recorded: ImportLedger, bus: Bus, counters: BridgeCounters, logger: Logger) {
        self.state = Mutex(State(recorded: recorded))
        self.file = file
        self.bus = bus
        self.counters = counters
        self.logger = logger
    }

    /// The ledger last queued (or recorded): a batch that changes nothing of it is not queued.
    var lastQueued: ImportLedger { state.withLock { $0.settling.last?.ledger ?? $0.recorded } }

    /// Importer thread, after a post: `total` events posted by this run so far; `recordable` may
    /// be written once this post has settled, covering `recordableTotal` of them (less than
    /// `total` while events are held for their origin's order); `sequence` is the bus sequence
    /// of the last event posted.
    func queue(total: UInt64, recordable: ImportLedger, recordableTotal: UInt64, sequence: UInt64) {
        let schedule = state.withLock { state in
            state.posted = total
            counters.importUnrecorded.store(total - state.recordedCount, ordering: .relaxed)
            if recordable != (state.settling.last?.ledger ?? state.recorded) {
                state.settling.append(.init(ledger: recordable, posted: .now, total: recordableTotal, sequence: sequence))
            }
            guard !state.scheduled, !state.settling.isEmpty else { return false }
            state.scheduled = true
            return true
        }
        if schedule { scheduleCheck() }
    }

    private func scheduleCheck() {
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(Self.writeGap.clampedNanoseconds))) { [self] in
            recordSettled()
            let again = state.withLock { state in
                state.scheduled = !state.settling.isEmpty
                return state.scheduled
            }
            if again { scheduleCheck() }
        }
    }

    /// Importer thread, at a stop: writes the newest queued ledger whether it has settled or not
    /// (what was posted reached the bus's subscribers, which are drained after this).
    func recordAll() {
        queue.sync { recordSettled(all: true) }
    }

    /// Importer thread, when the position starts anew (a first start, a stream made again):
    /// writes `ledger` at once and forgets what was queued.
    func replace(with ledger: ImportLedger) throws(BridgeError) {
        let result: Result<Void, BridgeError> = queue.sync {
            do throws(BridgeError) {
                try file.write(ledger.text)
            } catch {
                return .failure(error)
            }
            state.withLock { state in
                state.recorded = ledger
                state.settling = ImportSettling()
                state.recordedCount = state.posted
                counters.importUnrecorded.store(0, ordering: .relaxed)
            }
            return .success(())
        }
        try result.get()
    }

    /// Recorder queue: writes the newest settled ledger (every one, `all`). A failed write keeps
    /// the run going — the events are posted, and the importer's ledger in memory keeps
    /// redeliveries out — and is tried again at the next check; until one succeeds, a restart
    /// would post the difference again (never lose it).
    private func recordSettled(all: Bool = false) {
        let (settling, recorded) = state.withLock { ($0.settling, $0.recorded) }
        let newest = all ? settling.batches.indices.last
            : settling.newestRecordable(now: .now, patience: bus.handOutPatience, handedOut: bus.hasHandedOut(through:))
        guard let index = newest else { return }
        let batch = settling.batches[index]
        if batch.ledger != recorded {
            do throws(BridgeError) {
                try file.write(batch.ledger.text)
            } catch {
                let first = state.withLock { state in
                    defer { state.failing = true }
                    return !state.failing
                }
                if first { logger.error("bridge: \(error); the import position stays at stream sequence \(recorded.streamSequence) until a write succeeds") }
                lastError.withLock { $0 = error.description }
                return
            }
        }
        let recovered = state.withLock { state in
            // Only this queue removes batches, so `index` still names the same one.
            state.settling.removeThrough(index)
            state.recorded = batch.ledger
            state.recordedCount = max(state.recordedCount, batch.total)
            counters.importUnrecorded.store(state.posted - state.recordedCount, ordering: .relaxed)
            defer { state.failing = false }
            return state.failing
        }
        if recovered { lastError.withLock { $0 = nil } }
    }
}
