import EventBusKit
import Foundation

/// The bounded buffer between the bus and the exporter thread.
///
/// The bus's delivery loop calls ``offer(_:)`` (through the bridge's bus subscription): it takes
/// a lock, appends and signals — it never waits, so a stalled NATS never slows the bus or its
/// other subscribers. When the buffer is full the *newest* event is dropped (order matters more
/// than recency, as everywhere on the bus) and the drop is recorded in the ``GapBook`` for a
/// `bridge.gap` announcement. The exporter thread takes batches with ``take(max:into:)``.
final class ExportQueue: @unchecked Sendable {
    // @unchecked: all state is guarded by `condition`.
    private let condition = NSCondition()
    private var events: [Event] = []
    private var head = 0
    private let capacity: Int
    private var stopped = false
    private var nudged = false
    /// Whether the exporter is blocked in `take` (only then does an offer signal it).
    private var waiting = false
    private let gaps: GapBook

    init(capacity: Int, gaps: GapBook) {
        self.capacity = capacity
        self.gaps = gaps
        events.reserveCapacity(min(capacity, 4096))
    }

    /// Bus delivery loop. Never blocks beyond the lock.
    func offer(_ event: Event) {
        condition.lock()
        defer { condition.unlock() }
        guard events.count - head < capacity else {
            gaps.record(.exportOverflow, count: 1, subject: event.name)
            return
        }
        events.append(event)
        if waiting {
            waiting = false
            condition.signal()
        }
    }

    /// Exporter thread: waits until there are events, a ``wake()`` or a stop, and moves up to
    /// `max` events into `batch` (none after a wake-up with nothing queued). Returns false once
    /// stopped and empty.
    func take(max: Int, into batch: inout [Event]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while events.count == head && !stopped && !nudged {
            waiting = true
            condition.wait()
        }
        waiting = false
        nudged = false
        if events.count == head { return !stopped }
        let end = min(events.count, head + max)
        batch.append(contentsOf: events[head..<end])
        head = end
        if head == events.count {
            events.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 65_536 && head * 2 > events.count {
            events.removeFirst(head)
            head = 0
        }
        return true
    }

    /// Events waiting.
    var count: Int { condition.withLock { events.count - head } }

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
