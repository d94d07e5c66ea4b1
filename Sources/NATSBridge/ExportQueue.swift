@_spi(EventBusHost) import EventBusKit
import Foundation
import Synchronization

/// The bounded buffer between the bus and the exporter thread.
///
/// The bus's delivery loop calls ``offer(_:)`` (through the bridge's bus subscription): it takes
/// a lock, appends and signals — it never waits, so a stalled NATS never slows the bus or its
/// other subscribers. When the buffer is full the *newest* event is dropped (order matters more
/// than recency, as everywhere on the bus) and the drop is recorded in the ``GapBook`` for a
/// `bridge.gap` announcement. The exporter thread takes batches with ``take(max:into:sizes:)``.
///
/// Bounded twice: at most `capacity` events wait, and the bridge holds at most `byteCapacity`
/// estimated bytes of exports (``Event/estimatedBytes``) — a count alone would let a hundred
/// thousand events of a megabyte each pin a hundred gigabytes while NATS is away. The bytes of
/// an event stay held until the exporter releases them (``release(_:)``): in core mode once it
/// has handed the batch to nats.c, in durable mode once the stream acknowledged it — the
/// exporter swaps the event's estimate for what nats.c holds of it while it is in flight or
/// waits to be published again (``exchange(released:held:)``). So the batch in hand and the
/// unacknowledged publishes count against the same bound as the events that wait. An event
/// larger than `byteCapacity` is still taken when no bytes are held, so no event is too large
/// to be exported at all (as a module's ``Mailbox`` does).
final class ExportQueue: @unchecked Sendable {
    // @unchecked: all state but `heldBytes` is guarded by `condition`; `heldBytes` is an atomic,
    // grown only by `offer` (under the lock) and `exchange`, released from any thread.
    // `@exclusivity(unchecked)`: the lock already makes every access exclusive; the run-time
    // check of each access (a thread-local access set) was a tenth of what `offer` cost.
    private let condition = NSCondition()
    @exclusivity(unchecked) private var events: [Event] = []
    /// The estimated bytes of each event in `events`, at the same index.
    @exclusivity(unchecked) private var sizes: [Int] = []
    @exclusivity(unchecked) private var head = 0
    private let capacity: Int
    let byteCapacity: Int
    /// Estimated bytes of the events queued, taken and not released, and (durable) published
    /// and not yet acknowledged.
    private let heldBytes = Atomic<Int>(0)
    @exclusivity(unchecked) private var stopped = false
    @exclusivity(unchecked) private var nudged = false
    /// Whether the exporter is blocked in `take` (only then does an offer signal it).
    @exclusivity(unchecked) private var waiting = false
    private let gaps: GapBook

    init(capacity: Int, byteCapacity: Int, gaps: GapBook) {
        self.capacity = max(1, capacity)
        self.byteCapacity = max(1, byteCapacity)
        self.gaps = gaps
        events.reserveCapacity(min(capacity, 4096))
        sizes.reserveCapacity(min(capacity, 4096))
    }

    /// Bus delivery loop. Never blocks beyond the lock.
    func offer(_ event: Event) {
        let bytes = event.estimatedBytes
        condition.lock()
        defer { condition.unlock() }
        let held = heldBytes.load(ordering: .relaxed)
        guard events.count - head < capacity, held <= 0 || bytes <= byteCapacity - held else {
            gaps.record(.exportOverflow, count: 1, subject: event.name)
            return
        }
        heldBytes.add(bytes, ordering: .relaxed)
        events.append(event)
        sizes.append(bytes)
        if waiting {
            waiting = false
            condition.signal()
        }
    }

    /// Exporter thread: waits until there are events, a ``wake()`` or a stop, and moves up to
    /// `max` events into `batch` (empty) and their estimated bytes into `sizes` (none after a
    /// wake-up with nothing queued). Their bytes stay held until ``release(_:)``. Returns false
    /// once stopped and empty.
    ///
    /// When all that waits fits, the arrays change hands: the events are moved, not copied
    /// into the batch and released from the queue (a retain and a release of each event's
    /// fields, across the two threads).
    func take(max: Int, into batch: inout [Event], sizes taken: inout [Int]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while events.count == head && !stopped && !nudged {
            waiting = true
            condition.wait()
        }
        waiting = false
        nudged = false
        if events.count == head { return !stopped }
        if head == 0, events.count <= max, batch.isEmpty, taken.isEmpty {
            swap(&events, &batch)
            swap(&sizes, &taken)
            return true
        }
        let end = min(events.count, head + max)
        batch.append(contentsOf: events[head..<end])
        taken.append(contentsOf: sizes[head..<end])
        head = end
        if head == events.count {
            events.removeAll(keepingCapacity: true)
            sizes.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 65_536 && head * 2 > events.count {
            events.removeFirst(head)
            sizes.removeFirst(head)
            head = 0
        }
        return true
    }

    /// Any thread: the exporter is done with `bytes` (published in core mode, acknowledged or
    /// given up in durable mode).
    func release(_ bytes: Int) {
        heldBytes.subtract(bytes, ordering: .relaxed)
    }

    /// Exporter thread, durable mode: an event's estimate is released and what nats.c holds of
    /// it while unacknowledged is held instead, in one step.
    func exchange(released: Int, held: Int) {
        heldBytes.add(held - released, ordering: .relaxed)
    }

    /// Events waiting.
    var count: Int { condition.withLock { events.count - head } }

    /// Estimated bytes held: waiting, in the exporter's hands, unacknowledged.
    var bytes: Int { heldBytes.load(ordering: .relaxed) }

    /// Wakes the exporter for good: it drains what is left and stops.
    func stop() {
        condition.withLock {
            stopped = true
            waiting = false
            condition.broadcast()
        }
    }

    /// Wakes the exporter without stopping: NATS came back, or publishes wait to be retried.
    func wake() {
        condition.withLock {
            nudged = true
            waiting = false
            condition.broadcast()
        }
    }

    /// Exporter thread, durable mode: waits up to `timeout` for a wake-up or stop.
    func pause(_ timeout: TimeInterval) {
        condition.lock()
        if !stopped { _ = condition.wait(until: Date(timeIntervalSinceNow: timeout)) }
        condition.unlock()
    }

    var isStopped: Bool { condition.withLock { stopped } }
}
