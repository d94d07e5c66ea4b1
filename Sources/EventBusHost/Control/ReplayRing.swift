import EventBusKit
import Foundation

/// The most recent events posted on the bus, for clients that ask for a replay (`since_seq`,
/// `last`). Fixed capacity: the oldest event makes room for the newest.
///
/// It receives every posted event, in sequence order, so what it holds is a contiguous run of
/// sequence numbers: anything older than ``oldestSequence`` is known to be lost to replay.
/// Not thread-safe: ``ControlServer`` guards it with its lock.
struct ReplayRing {
    private var storage: [Event] = []
    private var head = 0  // index of the oldest event once the storage is full
    private(set) var capacity: Int
    /// The sequence of the newest event seen (held or not); 0 before the first.
    private(set) var newestSequence: UInt64 = 0
    /// When the newest event that no longer fits was posted: a replay from a time before it is
    /// incomplete.
    private(set) var newestEvictedTime: Date?

    init(capacity: Int) {
        self.capacity = max(0, capacity)
    }

    var count: Int { storage.count }

    /// The sequence of the oldest event held; `newestSequence + 1` when none is held (nothing
    /// older than the next event can be replayed).
    var oldestSequence: UInt64 {
        storage.isEmpty ? newestSequence + 1 : storage[head].sequence
    }

    mutating func append(_ event: Event) {
        newestSequence = event.sequence
        guard capacity > 0 else { return }
        if storage.count < capacity {
            storage.append(event)
        } else {
            newestEvictedTime = storage[head].wallTime
            storage[head] = event
            head = (head + 1) % capacity
        }
    }

    /// When the oldest held event was posted.
    var oldestTime: Date? { storage.isEmpty ? nil : storage[head].wallTime }

    /// Held events from oldest to newest, with index `i` counted from the oldest.
    private func event(at index: Int) -> Event {
        storage[(head + index) % storage.count]
    }

    /// Held events with a sequence of at least `sequence` that `include` accepts, oldest first.
    func events(from sequence: UInt64, where include: (Event) -> Bool) -> [Event] {
        guard !storage.isEmpty, sequence <= newestSequence else { return [] }
        let skip = sequence > oldestSequence ? Int(sequence - oldestSequence) : 0
        var result: [Event] = []
        for index in skip..<storage.count {
            let event = event(at: index)
            if include(event) { result.append(event) }
        }
        return result
    }

    /// The last `count` held events that `include` accepts, oldest first.
    func last(_ count: Int, where include: (Event) -> Bool) -> [Event] {
        var result: [Event] = []
        var index = storage.count - 1
        while index >= 0, result.count < count {
            let event = event(at: index)
            if include(event) { result.append(event) }
            index -= 1
        }
        return result.reversed()
    }

    /// Changes the capacity, keeping the newest events that fit.
    mutating func resize(to newCapacity: Int) {
        let newCapacity = max(0, newCapacity)
        let evicted = storage.count - newCapacity
        if evicted > 0 { newestEvictedTime = event(at: evicted - 1).wallTime }
        let kept = (max(0, evicted)..<storage.count).map(event(at:))
        storage = kept
        head = 0
        capacity = newCapacity
    }
}
