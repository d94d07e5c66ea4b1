/// Hands `body` each of `events` in turn, numbered from `first`, for as long as it returns true
/// (it returns false for an event it did not take); returns how many it took.
///
/// Why not copy each event and set its number: a copy takes a reference on the event's name,
/// source and fields and gives them back when it dies — half of a batched event's instructions.
/// Instead each event's bytes go into one scratch slot, which is moved out (taking no
/// reference), numbered, handed on and moved back; the slot is never destroyed, so no reference
/// is given back either. Sound because the caller's `events` hold those references for the whole
/// call, and whoever keeps an event copies it, taking its own.
@inline(__always)
func forEachNumbered(_ events: UnsafeBufferPointer<Event>, from first: UInt64, _ body: (Event) -> Bool) -> Int {
    guard let base = events.baseAddress else { return 0 }
    return withUnsafeTemporaryAllocation(of: Event.self, capacity: 1) { slot in
        let scratch = slot.baseAddress!
        var taken = 0
        while taken < events.count {
            UnsafeMutableRawPointer(scratch).copyMemory(from: base + taken, byteCount: MemoryLayout<Event>.stride)
            var event = scratch.move()
            event.sequence = first &+ UInt64(taken)
            let took = body(event)
            scratch.initialize(to: consume event)
            guard took else { break }
            taken += 1
        }
        return taken
    }
}
