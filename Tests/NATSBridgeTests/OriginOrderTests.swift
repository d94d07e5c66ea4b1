@testable import NATSBridge
import Testing

/// How a durable import puts an origin's events back in its order when the stream stored one
/// ahead of an earlier one: held until its predecessor comes, then both taken, in order; and
/// what bounds the holding.
@Suite struct OriginOrderTests {
    private typealias Order = OriginOrder<Int>

    /// Admits `sequences` of one origin (each naming `sequence - 1` as its predecessor unless
    /// `previous` says otherwise); returns the sequences taken, in the order they were taken.
    private func admit(_ sequences: [UInt64], instance: UInt64 = 7, previous: [UInt64: UInt64] = [:],
                       into order: inout Order, now: ContinuousClock.Instant = .now) -> [UInt64] {
        var taken: [UInt64] = []
        for sequence in sequences {
            let link = Order.Link(host: "alpha", instance: instance, sequence: sequence, previous: previous[sequence] ?? sequence - 1)
            switch order.admit(link, Int(sequence), bytes: 100, now: now) {
            case .next: taken.append(sequence)
            case .ready(let entries): taken += entries.map { UInt64($0.item) }
            case .held, .heldAlready: break
            }
        }
        return taken
    }

    @Test func anEventStoredAheadOfItsPredecessorsWaitsForThem() {
        var order = Order(last: [:])
        // 1 2, then 6 7 (stored ahead), then 3 4 5 (published again, stored behind), then 8.
        #expect(admit([1, 2, 6, 7, 3, 4, 5, 8], into: &order) == [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(order.heldCount == 0)
    }

    @Test func aCopyOfAHeldEventIsDroppedAndCopiesBehindTheChainPassToTheWindow() {
        var order = Order(last: [:])
        _ = admit([1, 2, 4], into: &order)
        let copy = Order.Link(host: "alpha", instance: 7, sequence: 4, previous: 3)
        guard case .heldAlready = order.admit(copy, 4, bytes: 100, now: .now) else {
            Issue.record("a second copy of a held event is not held again")
            return
        }
        #expect(admit([3, 2, 1], into: &order) == [3, 4, 2, 1])  // 2 and 1 again: the window's to judge
    }

    @Test func theChainStartsWhereTheRecordedPositionEnds() {
        var order = Order(last: ["alpha": ImportLedger.Position(instance: 7, sequence: 40)])
        #expect(admit([42, 43, 41], into: &order) == [41, 42, 43])
        // Another origin, never seen: taken as it comes, whatever it names.
        let beta = Order.Link(host: "beta", instance: 1, sequence: 900, previous: 899)
        guard case .next = order.admit(beta, 900, bytes: 100, now: .now) else {
            Issue.record("an unknown origin's first event was not taken at once")
            return
        }
    }

    @Test func withoutAPredecessorAnEventIsTakenAsItComes() {
        var order = Order(last: [:])
        // Core-mode and version-1 payloads name none (0).
        #expect(admit([1, 5, 3], previous: [5: 0, 3: 0], into: &order) == [1, 5, 3])
    }

    @Test func aNewerInstanceReleasesWhatTheOlderOneHeld() {
        var order = Order(last: [:])
        #expect(admit([1, 2, 5, 6], into: &order) == [1, 2])  // 3 and 4 lost with a SIGKILLed origin
        // Its next run starts at 1 with no predecessor: 5 and 6 first, then the new run.
        #expect(admit([1, 2], instance: 8, previous: [1: 0], into: &order) == [5, 6, 1, 2])
        #expect(order.heldCount == 0)
    }

    @Test func heldEventsAreTakenOnceTheyWaitedTheirPatience() {
        var order = Order(last: [:])
        let start = ContinuousClock.now
        #expect(admit([1, 2, 5, 6], into: &order, now: start) == [1, 2])
        #expect(order.expired(now: start + order.patience - .milliseconds(1)).isEmpty)
        #expect(order.expired(now: start + order.patience).map(\.item) == [5, 6])
        #expect(order.heldCount == 0)
        // The chain went on from the last released: the predecessors, if they come, are behind it.
        #expect(admit([7, 3], into: &order, now: start) == [7, 3])
    }

    @Test func holdingIsBoundedPerOrigin() {
        var order = Order(last: [:])
        _ = admit([1], into: &order)
        let held = (3...UInt64(Order.limit + 2)).map { $0 }
        #expect(admit(held, into: &order).isEmpty)
        #expect(order.heldCount == Order.limit)
        // One more than the limit: everything held is taken, in order.
        #expect(admit([UInt64(Order.limit + 3)], into: &order) == held + [UInt64(Order.limit + 3)])
        #expect(order.heldCount == 0)
    }

    @Test func anEventContradictingAHeldOneIsTakenAsItComes() {
        var order = Order(last: [:])
        _ = admit([1, 2, 4], into: &order)  // 4 waits for 3
        // Another "4th" naming 3 as well: its origin does not publish two events after one.
        #expect(admit([9], previous: [9: 3], into: &order) == [9])
        #expect(admit([3], into: &order) == [3, 4])
    }

    /// Anyone who may publish under the prefix can claim predecessors that never come, for many
    /// origins: what all of them hold is bounded, and the origin holding most is released first.
    @Test func whatAllOriginsHoldIsBoundedInBytes() {
        var order = Order(last: [:])
        let large = Order.byteLimit / 4
        for (index, host) in ["a", "b", "c", "d", "e"].enumerated() {
            _ = order.admit(Order.Link(host: host, instance: 1, sequence: 1, previous: 0), 0, bytes: 1, now: .now)
            // Each origin's 3rd event arrives before its 2nd, and is large; "c"'s is the largest.
            let bytes = host == "c" ? large + 1 : large - index
            guard case .held = order.admit(Order.Link(host: host, instance: 1, sequence: 3, previous: 2), 3, bytes: bytes, now: .now) else {
                Issue.record("\(host)'s event was not held")
                return
            }
        }
        #expect(order.isOverBudget)
        let shed = order.shed()
        #expect(shed.map(\.link.host) == ["c"])
        #expect(!order.isOverBudget && order.heldCount == 4)
        #expect(!order.isHolding("c") && order.isHolding("a"))
    }
}
