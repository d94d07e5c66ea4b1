/// A FIFO queue over a growable circular array: O(1) append and removal at the front, which
/// `Array.removeFirst` is not. Internal: the bus's job queue and per-subscription buffers.
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
        return element
    }

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
        var bigger = [Element?](repeating: nil, count: Swift.max(16, storage.count * 2))
        for i in 0..<count { bigger[i] = storage[(head + i) % storage.count].take() }
        storage = bigger
        head = 0
    }
}
