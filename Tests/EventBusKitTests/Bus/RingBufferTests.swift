@testable import EventBusKit
import Testing

/// The FIFO under mailboxes and subscription buffers: order under any mix of appends and
/// removals, and the memory of a spike given back once it drained.
@Suite struct RingBufferTests {
    @Test func keepsFIFOOrderUnderRandomAppendsAndRemovals() {
        var ring = RingBuffer<Int>()
        var model: [Int] = []
        var generator = SystemRandomNumberGenerator()
        var next = 0
        for _ in 0..<200_000 {
            // Phases of growth and of draining, so the ring both grows and shrinks.
            let appendBias = (next / 20_000) % 2 == 0 ? 3 : 1
            if Int.random(in: 0..<4, using: &generator) < appendBias {
                ring.append(next)
                model.append(next)
                next += 1
            } else {
                #expect(ring.popFirst() == (model.isEmpty ? nil : model.removeFirst()))
            }
            #expect(ring.count == model.count)
        }
        while let value = ring.popFirst() { #expect(value == model.removeFirst()) }
        #expect(model.isEmpty)
    }

    @Test func aDrainedSpikeGivesItsSlotsBack() {
        var ring = RingBuffer<Int>()
        for i in 0..<100_000 { ring.append(i) }
        #expect(ring.capacity >= 100_000)
        for i in 0..<99_990 { #expect(ring.popFirst() == i) }
        #expect(ring.capacity <= 4 * RingBuffer<Int>.keptCapacity, "\(ring.capacity) slots for 10 elements")
        #expect(Array(sequence(state: ring) { $0.popFirst() }) == Array(99_990..<100_000))
        // Small queues keep their slots: no resizing for a queue that swings around a few hundred.
        var small = RingBuffer<Int>()
        for i in 0..<1_000 { small.append(i) }
        let slots = small.capacity
        for _ in 0..<999 { _ = small.popFirst() }
        #expect(small.capacity == slots)
    }
}
