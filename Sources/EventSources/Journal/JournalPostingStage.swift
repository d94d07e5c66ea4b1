import EventBusKit
import Foundation
import Synchronization

/// The second stage of a journal source: turns the reader thread's batches into events and posts
/// them, in order, on its own serial queue. Reading the journal (the reader thread, which must
/// own the sd_journal handle) and building and delivering events (this queue) overlap, so the
/// source ingests at about the rate libsystemd reads rather than at the sum of both costs.
///
/// ## Bounds
/// At most ``inFlightLimit`` batches are handed over and not yet posted; beyond that the reader
/// waits. A slow subscriber on this queue slows reading instead of growing memory, as it did
/// when the reader posted itself.
///
/// ## Threads
/// `handOver` and `post` are called on the reader thread only; the queue runs the
/// decoding and posting — in runs of ``eventsPerPost`` entries through `Bus.post(contentsOf:)`
/// — so subscribers without a mailbox are called on it. `stop` and `drain`
/// run in `JournalSource.stop`, on the stopping thread.
final class JournalPostingStage: @unchecked Sendable {
    static let inFlightLimit = 4

    private let bus: Bus
    private let lag: JournalLag
    private let queue: DispatchQueue
    private let stopped = Atomic<Bool>(false)
    private static let queueKey = DispatchSpecificKey<ObjectIdentifier>()

    private let condition = NSCondition()
    // Guarded by `condition`.
    private var inFlight = 0
    private var spare: [JournalEntryBatch] = []

    // Used on `queue` only.
    private var decoder: JournalEventDecoder
    /// Decoded entries not yet posted; its storage is kept from one run to the next.
    private var events: [Event] = []
    /// Entries posted per `post(contentsOf:)`: one lock or compare-and-swap of the bus per run
    /// instead of per entry, while a stop still takes effect within a run this long.
    static let eventsPerPost = 128

    init(source: String, bus: Bus, lag: JournalLag) {
        self.bus = bus
        self.lag = lag
        self.decoder = JournalEventDecoder(source: source)
        queue = DispatchQueue(label: "eventbus.journal.posting")
        queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self))
    }

    /// Whether the caller is running on this stage's queue (inside a delivery).
    var isCurrent: Bool { DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self) }

    private func isStopped() -> Bool { stopped.load(ordering: .acquiring) }

    /// Hands the filled `batch` over, to be posted after everything handed over before it, and
    /// leaves an empty one in its place (one that has been posted already, keeping its storage,
    /// or a new one). Waits while ``inFlightLimit`` batches are pending; once stopped, drops the
    /// batch instead.
    func handOver(_ batch: inout JournalEntryBatch) {
        condition.lock()
        while inFlight >= Self.inFlightLimit && !isStopped() { condition.wait() }
        let accepted = !isStopped()
        if accepted { inFlight += 1 }
        var full = spare.popLast() ?? JournalEntryBatch()
        condition.unlock()
        swap(&full, &batch)
        guard accepted else { return }
        // Moved through a box so that this queue holds the only reference to the storage, and
        // emptying it keeps the capacity instead of copying.
        let handed = Handed(consume full)
        queue.async { [self] in
            guard var batch = handed.batch.take() else { return }
            for entry in batch.entries {
                events.append(decoder.event(entry, in: batch))
                if events.count == Self.eventsPerPost { postEvents() }
            }
            postEvents()
            if let last = batch.entries.last { lag.posted(batch.entries.count, lastRealtime: last.realtime) }
            batch.removeAll()
            condition.lock()
            inFlight -= 1
            spare.append(consume batch)
            condition.signal()
            condition.unlock()
        }
    }

    /// Posts the decoded run as one batch (unless stopped) and empties it. On `queue` only.
    private func postEvents() {
        if !events.isEmpty && !isStopped() { bus.post(contentsOf: events) }
        events.removeAll(keepingCapacity: true)
    }

    /// Posts `event` after everything handed over before it (status and gap notices keep their
    /// place among the entries).
    func post(_ event: Event) {
        queue.async { [self] in
            if !isStopped() { bus.post(event) }
        }
    }

    /// Posts nothing more from now on (but the run of at most ``eventsPerPost`` entries being
    /// delivered at the moment), and wakes a reader waiting for room.
    func stop() {
        stopped.store(true, ordering: .releasing)
        condition.withLock { condition.broadcast() }
    }

    /// Returns once the queue has run everything handed over. Not to be called on the queue.
    func drain() {
        queue.sync {}
    }
}

/// A batch on its way to the posting queue.
private final class Handed: @unchecked Sendable {
    /// Taken (moved out) by the queue's work item, the only code that touches it.
    var batch: JournalEntryBatch?
    init(_ batch: consuming JournalEntryBatch) { self.batch = batch }
}
