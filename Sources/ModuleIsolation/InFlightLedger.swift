/// What a process-isolated module was sent and has not reported handled, item by item in the
/// order sent, with what each counts against the module's mailbox bounds.
///
/// Why: the mailbox's bounds (`mailbox_capacity`, `mailbox_bytes`) bound everything the module
/// holds, also what has left the host's mailbox for its worker — on its way (the channel, the
/// socket) or in the worker's queue. The host keeps those counted
/// (``Mailbox/keepElsewhere(events:bytes:)``) until the worker says how many items it has
/// handled; this ledger turns that count into the events and bytes to release. It weighs each
/// item when it is sent rather than trusting the worker to weigh what it received: a count the
/// two sides disagreed on would leak, and the module would drop everything once it added up.
///
/// Not thread-safe: ``ModuleForwarding`` guards it with its lock.
struct InFlightLedger {
    /// What one item counts: an event is one, with its estimated bytes (zero when the mailbox
    /// has no byte bound); a gap notice is none, as in the mailbox.
    struct Weight: Equatable {
        var events = 0
        var bytes = 0

        static func += (total: inout Weight, weight: Weight) {
            total.events += weight.events
            total.bytes += weight.bytes
        }
    }

    private var items: [Weight] = []
    /// Where the listed items start in `items` (those before were handled).
    private var head = 0
    /// Items handled and popped so far.
    private var popped: UInt64 = 0
    /// The most the worker has reported handled: a report may come before the items it covers
    /// are listed (the worker can handle a batch before its sender is back from sending it).
    private var reported: UInt64 = 0

    /// The events listed (sent, not reported handled).
    private(set) var events = 0

    /// Nothing listed: the worker has handled all it was sent (gap notices too).
    var isEmpty: Bool { head == items.count }

    /// Lists items just sent, after those listed; returns the weight of those already reported
    /// handled.
    mutating func append(_ weights: [Weight]) -> Weight {
        items.append(contentsOf: weights)
        for weight in weights { events += weight.events }
        return popReported()
    }

    /// The worker has handled `handled` items so far; returns the weight of those that leaves.
    mutating func settle(handled: UInt64) -> Weight {
        reported = max(reported, handled)
        return popReported()
    }

    /// Empties it (the worker is gone, or the module stopped); returns what it listed.
    mutating func removeAll() -> Weight {
        var total = Weight()
        for weight in items[head...] { total += weight }
        self = InFlightLedger()
        return total
    }

    private mutating func popReported() -> Weight {
        var released = Weight()
        while popped < reported, head < items.count {
            released += items[head]
            head += 1
            popped += 1
        }
        events -= released.events
        if head >= 4_096, head * 2 >= items.count {
            items.removeFirst(head)
            head = 0
        }
        return released
    }
}
