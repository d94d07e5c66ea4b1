/// A FIFO queue over a growable circular array: O(1) append and removal at the front, which
/// `Array.removeFirst` is not. Internal: the bus's job queue, per-subscription buffers and
/// mailboxes.
///
/// It gives memory back: once at most a quarter of a large array is in use, the array halves.
/// A mailbox that held 50 000 events through one stall would otherwise keep their slots for
/// the life of the process, and every new high-water mark would add to the host's resident
/// size for good. The quarter/half hysteresis keeps a queue that swings around one size from
/// resizing back and forth, so appends and removals stay amortized O(1).
struct RingBuffer<Element> {
    private var storage: [Element?] = []
    private var head = 0
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    mutating func append(_ element: Element) {
        if count == storage.count { grow() }
        storage[(head + count) % storage.count] = element
        count += 1
    }

    mutating func popFirst() -> Element? {
        guard count > 0 else { return nil }
        let element = storage[head].take()
        head = (head + 1) % storage.count
        count -= 1
        if count == 0 { head = 0 }
        if storage.count > Self.keptCapacity && count <= storage.count / 4 { relayout(capacity: storage.count / 2) }
        return element
    }

    /// Slots kept however empty the queue gets: below this, shrinking saves too little to pay.
    static var keptCapacity: Int { 1024 }

    /// The number of slots, for tests.
    var capacity: Int { storage.count }

    /// Changes the newest element in place.
    mutating func updateLast(_ body: (inout Element) -> Void) {
        precondition(count > 0)
        let index = (head + count - 1) % storage.count
        body(&storage[index]!)
    }

    var last: Element? { count == 0 ? nil : storage[(head + count - 1) % storage.count] }

    mutating func removeAll() {
        storage = []
        head = 0
        count = 0
    }

    private mutating func grow() {
        relayout(capacity: Swift.max(16, storage.count * 2))
    }

    /// Moves the elements, oldest first, to the start of a new array of `capacity` slots.
    private mutating func relayout(capacity: Int) {
        var moved = [Element?](repeating: nil, count: capacity)
        for i in 0..<count { moved[i] = storage[(head + i) % storage.count].take() }
        storage = moved
        head = 0
    }
}
