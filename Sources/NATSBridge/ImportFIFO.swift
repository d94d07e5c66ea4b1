/// A first-in first-out queue over an array and a head index, for the import path's origin
/// queues (``OriginShares``): O(1) append and removal at both ends, and the storage of a burst
/// is given back once the queue is empty (beyond ``keptCapacity`` slots), so a flood's
/// high-water mark does not stay in the host's resident size.
///
/// Not thread-safe: each is owned by one delivery thread.
struct ImportFIFO<Element> {
    private var items: [Element] = []
    private var head = 0

    /// Slots kept when the queue empties: a paced queue does not reallocate for every message.
    static var keptCapacity: Int { 256 }

    var count: Int { items.count - head }
    var isEmpty: Bool { head == items.count }

    mutating func append(_ element: Element) { items.append(element) }

    mutating func popFirst() -> Element? {
        guard head < items.count else { return nil }
        let element = items[head]
        head += 1
        if head == items.count {
            clear()
        } else if head >= Self.keptCapacity && head * 2 >= items.count {
            items.removeFirst(head)  // amortized: the half already taken is dropped at once
            head = 0
        }
        return element
    }

    mutating func popLast() -> Element? {
        guard head < items.count else { return nil }
        let element = items.removeLast()
        if head == items.count { clear() }
        return element
    }

    /// The waiting elements, oldest first.
    var elements: ArraySlice<Element> { items[head...] }

    private mutating func clear() {
        items.removeAll(keepingCapacity: items.capacity <= Self.keptCapacity)
        head = 0
    }
}
