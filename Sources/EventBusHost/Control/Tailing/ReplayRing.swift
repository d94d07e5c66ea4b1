@_spi(EventBusHost) import EventBusKit
import Foundation

/// The most recent events posted on the bus, for clients that ask for a replay (`since_seq`,
/// `last`). Bounded twice: at most `capacity` events and at most `byteCapacity` bytes (by
/// ``Event/estimatedBytes``); the oldest events go while either is exceeded. Counting events
/// alone let 10 000 posts of 900 KB hold 9 GB.
///
/// It receives every posted event, in sequence order, so what it holds is a contiguous run of
/// sequence numbers: anything older than ``oldestSequence`` is known to be lost to replay. An
/// event larger than `byteCapacity` on its own is not held (and everything before it is gone).
/// Not thread-safe: ``ControlServer`` guards it with its lock.
struct ReplayRing {
    /// A circular buffer: `count` events from `head` on, wrapping; the other slots are nil so an
    /// evicted event's storage is freed at once, not when its slot is reused. It grows by
    /// doubling up to `capacity` slots (about 80 bytes each: 800 KB for the default 10 000).
    private var slots: [(event: Event, bytes: Int)?] = []
    private var head = 0
    private(set) var count = 0
    private(set) var capacity: Int
    private(set) var byteCapacity: Int
    /// The estimated bytes of the events held.
    private(set) var bytes = 0
    /// The sequence of the newest event seen (held or not); 0 before the first.
    private(set) var newestSequence: UInt64 = 0
    /// When the newest event that no longer fits was posted: a replay from a time before it is
    /// incomplete.
    private(set) var newestEvictedTime: Date?

    init(capacity: Int, byteCapacity: Int) {
        self.capacity = max(0, capacity)
        self.byteCapacity = max(0, byteCapacity)
    }

    /// The sequence of the oldest event held; `newestSequence + 1` when none is held (nothing
    /// older than the next event can be replayed).
    var oldestSequence: UInt64 {
        count == 0 ? newestSequence + 1 : event(at: 0).sequence
    }

    /// When the oldest held event was posted.
    var oldestTime: Date? { count == 0 ? nil : event(at: 0).wallTime }

    /// Holds `event` (of `eventBytes`, its ``Event/estimatedBytes``) and evicts what no longer
    /// fits; returns the bytes evicted.
    @discardableResult
    mutating func append(_ event: Event, bytes eventBytes: Int) -> Int {
        newestSequence = event.sequence
        guard capacity > 0, eventBytes <= byteCapacity else {
            newestEvictedTime = event.wallTime
            return evict(count)
        }
        var evicted = evict(max(count + 1 - capacity, 0))
        while bytes + eventBytes > byteCapacity { evicted += evict(1) }
        if count == slots.count { grow() }
        slots[(head + count) % slots.count] = (event, eventBytes)
        count += 1
        bytes += eventBytes
        return evicted
    }

    /// Drops the `evicted` oldest events; returns their bytes.
    @discardableResult
    private mutating func evict(_ evicted: Int) -> Int {
        let before = bytes
        for _ in 0..<evicted {
            // Moved out, not copied: a copy would retain and release the event's storage once
            // more, on the bus's delivery loop, for every event posted once the ring is full.
            let oldest = slots[head].take()!
            newestEvictedTime = oldest.event.wallTime
            bytes -= oldest.bytes
            head = (head + 1) % slots.count
            count -= 1
        }
        if count == 0 { head = 0 }
        return before - bytes
    }

    /// Lays the events out from slot 0 in twice the slots (at most `capacity`).
    private mutating func grow() {
        relayout(slotCount: min(capacity, max(16, slots.count * 2)))
    }

    private mutating func relayout(slotCount: Int) {
        var new = [(event: Event, bytes: Int)?](repeating: nil, count: slotCount)
        for index in 0..<count { new[index] = slots[(head + index) % slots.count] }
        slots = new
        head = 0
    }

    /// Held events from oldest to newest, with index `i` counted from the oldest.
    private func event(at index: Int) -> Event {
        slots[(head + index) % slots.count]!.event
    }

    /// Held events with a sequence of at least `sequence` that `include` accepts, oldest first.
    func events(from sequence: UInt64, where include: (Event) -> Bool) -> [Event] {
        guard count > 0, sequence <= newestSequence else { return [] }
        let skip = sequence > oldestSequence ? Int(sequence - oldestSequence) : 0
        var result: [Event] = []
        for index in skip..<count {
            let event = event(at: index)
            if include(event) { result.append(event) }
        }
        return result
    }

    /// The last `count` held events that `include` accepts, oldest first.
    func last(_ wanted: Int, where include: (Event) -> Bool) -> [Event] {
        var result: [Event] = []
        var index = count - 1
        while index >= 0, result.count < wanted {
            let event = event(at: index)
            if include(event) { result.append(event) }
            index -= 1
        }
        return result.reversed()
    }

    /// Changes the bounds, keeping the newest events that fit; the slots shrink to what is held.
    mutating func resize(capacity newCapacity: Int, byteCapacity newByteCapacity: Int) {
        capacity = max(0, newCapacity)
        byteCapacity = max(0, newByteCapacity)
        evict(max(count - capacity, 0))
        while bytes > byteCapacity { evict(1) }
        relayout(slotCount: count)
    }
}
