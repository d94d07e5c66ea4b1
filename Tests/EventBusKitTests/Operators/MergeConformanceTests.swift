import EventBusKit
import Foundation
import Testing

private typealias Pub = TestPublisher<Int, OperatorTestError>
private typealias Sub = TestSubscriber<Int, OperatorTestError>

/// The corners where a straightforward merge differs from Apple's Combine, pinned to Combine's
/// behaviour, and the arities Combine has beyond four: `Merge5` … `Merge8`.
@Suite("Merge conformance with Combine")
struct MergeConformanceTests {
    // MARK: 3. Limited demand: one waiting value per upstream, served in index order

    @Test func aNewerValueFromTheSameUpstreamReplacesTheWaitingOne() {
        let a = Pub(), b = Pub()
        let sub = Sub()
        Publishers.Merge(a, b).subscribe(sub)
        #expect(a.send(1) == .none)
        #expect(a.send(2) == .none)  // beyond its grant of 1: replaces 1
        #expect(a.send(3) == .none)  // replaces 2
        sub.request(.max(3))
        #expect(sub.values == [3])
        // Its grant is renewed once its value went out.
        #expect(a.subscription.history == [.requested(.max(1)), .requested(.max(1))])
        #expect(sub.demandViolations == 0)
    }

    @Test func waitingValuesAreServedInUpstreamIndexOrderNotArrivalOrder() {
        let pubs = (0..<3).map { _ in Pub() }
        let sub = Sub()
        Publishers.Merge3(pubs[0], pubs[1], pubs[2]).subscribe(sub)
        pubs[2].send(30)
        pubs[0].send(10)
        pubs[1].send(20)
        sub.request(.max(1))
        #expect(sub.values == [10])
        sub.request(.max(2))
        #expect(sub.values == [10, 20, 30])
        for pub in pubs {
            #expect(pub.subscription.history == [.requested(.max(1)), .requested(.max(1))])
        }
    }

    @Test func switchingToUnlimitedFlushesTheSlotsInIndexOrder() {
        let pubs = (0..<4).map { _ in Pub() }
        let sub = Sub()
        Publishers.Merge4(pubs[0], pubs[1], pubs[2], pubs[3]).subscribe(sub)
        pubs[3].send(3)
        pubs[1].send(1)
        pubs[1].send(11)  // replaces 1
        sub.request(.unlimited)
        #expect(sub.values == [11, 3])
        for pub in pubs {
            #expect(pub.subscription.history == [.requested(.max(1)), .requested(.unlimited)])
        }
        pubs[2].send(2)
        #expect(sub.values == [11, 3, 2])
    }

    @Test func aMergeHoldsAtMostOneValuePerUpstream() {
        // Whatever upstreams that ignore demand send, a merge without demand keeps N values.
        let pubs = (0..<3).map { _ in Pub() }
        let sub = Sub()
        Publishers.MergeMany(pubs).subscribe(sub)
        for round in 0..<1_000 {
            for (index, pub) in pubs.enumerated() { pub.send(round * 10 + index) }
        }
        sub.request(.unlimited)
        #expect(sub.values == [9_990, 9_991, 9_992])
    }

    // MARK: 4. A failure cancels every upstream, the failed one included

    @Test(arguments: 0..<2)
    func theFailedUpstreamIsCancelledToo(failing: Int) {
        let pubs = [Pub(), Pub()]
        let sub = Sub(initialDemand: .unlimited)
        pubs[0].merge(with: pubs[1]).subscribe(sub)
        pubs[failing].send(completion: .failure(OperatorTestError(failing)))
        #expect(sub.completions == [.failure(OperatorTestError(failing))])
        #expect(pubs[failing].subscription.history == [.requested(.unlimited), .cancelled])
        #expect(pubs[1 - failing].subscription.history == [.requested(.unlimited), .cancelled])
    }

    @Test func aFinishedUpstreamIsNotCancelledByAnotherOnesFailure() {
        let a = Pub(), b = Pub()
        let sub = Sub(initialDemand: .unlimited)
        Publishers.Merge(a, b).subscribe(sub)
        a.send(completion: .finished)
        b.send(completion: .failure(OperatorTestError(2)))
        #expect(a.subscription.history == [.requested(.unlimited)])
        #expect(b.subscription.history == [.requested(.unlimited), .cancelled])
    }

    // MARK: 6. Merge5 … Merge8

    @Test func mergeWithFourToSevenOthersMakesMerge5ToMerge8() {
        let p = (0..<8).map { _ in Pub() }
        let five: Publishers.Merge5<Pub, Pub, Pub, Pub, Pub> = p[0].merge(with: p[1], p[2], p[3], p[4])
        let six: Publishers.Merge6<Pub, Pub, Pub, Pub, Pub, Pub> =
            p[0].merge(with: p[1], p[2], p[3], p[4], p[5])
        let seven: Publishers.Merge7<Pub, Pub, Pub, Pub, Pub, Pub, Pub> =
            p[0].merge(with: p[1], p[2], p[3], p[4], p[5], p[6])
        let eight: Publishers.Merge8<Pub, Pub, Pub, Pub, Pub, Pub, Pub, Pub> =
            p[0].merge(with: p[1], p[2], p[3], p[4], p[5], p[6], p[7])
        #expect(five.e === p[4] && six.f === p[5] && seven.g === p[6] && eight.h === p[7])
        #expect(eight.a === p[0] && eight.b === p[1] && eight.c === p[2] && eight.d === p[3])

        // Chaining from a smaller merge extends it, as in Combine.
        let fromMerge: Publishers.Merge8<Pub, Pub, Pub, Pub, Pub, Pub, Pub, Pub> =
            Publishers.Merge(p[0], p[1]).merge(with: p[2], p[3], p[4], p[5], p[6], p[7])
        let fromMerge4: Publishers.Merge6<Pub, Pub, Pub, Pub, Pub, Pub> =
            Publishers.Merge4(p[0], p[1], p[2], p[3]).merge(with: p[4], p[5])
        let fromMerge7: Publishers.Merge8<Pub, Pub, Pub, Pub, Pub, Pub, Pub, Pub> =
            seven.merge(with: p[7])
        #expect(fromMerge.h === p[7] && fromMerge4.f === p[5] && fromMerge7.h === p[7])
    }

    @Test(arguments: 5...8)
    func everyArityDeliversFromEveryUpstreamAndFinishesAfterTheLast(arity: Int) {
        let p = (0..<arity).map { _ in Pub() }
        let sub = Sub(initialDemand: .unlimited)
        subscribe(sub, toMergeOf: p)
        for index in (0..<arity).reversed() { p[index].send(index) }
        #expect(sub.values == Array((0..<arity).reversed()))
        for pub in p.dropLast() { pub.send(completion: .finished) }
        #expect(sub.completions.isEmpty)
        p[arity - 1].send(completion: .finished)
        #expect(sub.completions == [.finished])
        for pub in p { #expect(pub.subscription.history == [.requested(.unlimited)]) }
    }

    @Test(arguments: 5...8)
    func everyArityHonoursDemandAndFailsCancellingAll(arity: Int) {
        let p = (0..<arity).map { _ in Pub() }
        let sub = Sub()
        subscribe(sub, toMergeOf: p)
        for index in (0..<arity).reversed() { p[index].send(index * 10) }
        sub.request(.max(2))
        #expect(sub.values == [0, 10])  // index order
        p[arity - 1].send(completion: .failure(OperatorTestError(arity)))
        #expect(sub.completions == [.failure(OperatorTestError(arity))])
        #expect(sub.values == [0, 10])
        for pub in p { #expect(pub.subscription.history.last == .cancelled) }
    }

    @Test func merge5To8AreEquatableWhenTheirUpstreamsAre() {
        #expect(Publishers.Merge5(Just(1), Just(2), Just(3), Just(4), Just(5))
            == Publishers.Merge5(Just(1), Just(2), Just(3), Just(4), Just(5)))
        #expect(Publishers.Merge6(Just(1), Just(2), Just(3), Just(4), Just(5), Just(6))
            != Publishers.Merge6(Just(1), Just(2), Just(3), Just(4), Just(5), Just(7)))
        #expect(Publishers.Merge7(Just(1), Just(2), Just(3), Just(4), Just(5), Just(6), Just(7))
            == Publishers.Merge7(Just(1), Just(2), Just(3), Just(4), Just(5), Just(6), Just(7)))
        #expect(Publishers.Merge8(Just(1), Just(2), Just(3), Just(4), Just(5), Just(6), Just(7), Just(8))
            != Publishers.Merge8(Just(0), Just(2), Just(3), Just(4), Just(5), Just(6), Just(7), Just(8)))
    }

    @Test func merge8OfJustsUnderDemand() {
        let sub = TestSubscriber<Int, Never>(initialDemand: .max(3))
        Just(1).merge(with: Just(2), Just(3), Just(4), Just(5), Just(6), Just(7), Just(8)).subscribe(sub)
        #expect(sub.values == [1, 2, 3])
        sub.request(.max(5))
        #expect(sub.values == [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(sub.completions == [.finished])
    }

    private func subscribe(_ sub: Sub, toMergeOf p: [Pub]) {
        switch p.count {
        case 5: Publishers.Merge5(p[0], p[1], p[2], p[3], p[4]).subscribe(sub)
        case 6: Publishers.Merge6(p[0], p[1], p[2], p[3], p[4], p[5]).subscribe(sub)
        case 7: Publishers.Merge7(p[0], p[1], p[2], p[3], p[4], p[5], p[6]).subscribe(sub)
        case 8: Publishers.Merge8(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]).subscribe(sub)
        default: Issue.record("no Merge\(p.count)")
        }
    }
}
