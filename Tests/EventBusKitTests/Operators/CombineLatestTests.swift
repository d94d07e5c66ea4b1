import EventBusKit
import Foundation
import Testing

private typealias Pub = TestPublisher<Int, OperatorTestError>
private typealias Pair = TestSubscriber<(Int, Int), OperatorTestError>

private func pairs<F>(_ sub: TestSubscriber<(Int, Int), F>) -> [[Int]] {
    sub.values.map { [$0.0, $0.1] }
}

@Suite("CombineLatest")
struct CombineLatestTests {
    // MARK: Values (the examples of Apple's documentation)

    @Test func twoUpstreamsEmitLatestPairsOnceBothHaveAValue() {
        let pub1 = PassthroughSubject<Int, OperatorTestError>(), pub2 = PassthroughSubject<Int, OperatorTestError>()
        let sub = Pair(initialDemand: .unlimited)
        pub1.combineLatest(pub2).subscribe(sub)
        pub1.send(1)
        pub1.send(2)
        #expect(sub.values.isEmpty)
        pub2.send(2)
        pub1.send(3)
        pub1.send(45)
        pub2.send(22)
        #expect(pairs(sub) == [[2, 2], [3, 2], [45, 2], [45, 22]])
        #expect(sub.subscriptionCount == 1)
    }

    @Test func threeUpstreams() {
        let pub = PassthroughSubject<Int, Never>(), pub2 = PassthroughSubject<String, Never>()
        let pub3 = PassthroughSubject<Int, Never>()
        let sub = TestSubscriber<(Int, String, Int), Never>(initialDemand: .unlimited)
        let combined: Publishers.CombineLatest3 = pub.combineLatest(pub2, pub3)
        combined.subscribe(sub)
        pub.send(1)
        pub.send(2)
        pub2.send("2")
        pub3.send(9)
        pub.send(3)
        pub2.send("12")
        pub.send(13)
        pub3.send(19)
        #expect(sub.values.map { "\($0.0) \($0.1) \($0.2)" }
            == ["2 2 9", "3 2 9", "3 12 9", "13 12 9", "13 12 19"])
    }

    @Test func fourUpstreams() {
        let subjects = (0..<4).map { _ in PassthroughSubject<Int, Never>() }
        let sub = TestSubscriber<(Int, Int, Int, Int), Never>(initialDemand: .unlimited)
        let combined: Publishers.CombineLatest4 =
            subjects[0].combineLatest(subjects[1], subjects[2], subjects[3])
        combined.subscribe(sub)
        subjects[0].send(1)
        subjects[0].send(2)
        subjects[1].send(2)
        subjects[2].send(9)
        subjects[3].send(1)
        subjects[0].send(3)
        subjects[1].send(12)
        subjects[0].send(13)
        subjects[2].send(19)
        #expect(sub.values.map { [$0.0, $0.1, $0.2, $0.3] }
            == [[2, 2, 9, 1], [3, 2, 9, 1], [3, 12, 9, 1], [13, 12, 9, 1], [13, 12, 19, 1]])
    }

    @Test func transformOverloads() {
        let pubs = (0..<4).map { _ in PassthroughSubject<Int, Never>() }
        let sub2 = TestSubscriber<Int, Never>(initialDemand: .unlimited)
        let map2: Publishers.Map<Publishers.CombineLatest<PassthroughSubject<Int, Never>,
                                                          PassthroughSubject<Int, Never>>, Int> =
            pubs[0].combineLatest(pubs[1]) { $0 * $1 }
        map2.subscribe(sub2)
        let sub3 = TestSubscriber<Int, Never>(initialDemand: .unlimited)
        pubs[0].combineLatest(pubs[1], pubs[2]) { $0 * $1 * $2 }.subscribe(sub3)
        let sub4 = TestSubscriber<Int, Never>(initialDemand: .unlimited)
        pubs[0].combineLatest(pubs[1], pubs[2], pubs[3]) { $0 * $1 * $2 * $3 }.subscribe(sub4)

        pubs[0].send(2)
        pubs[1].send(3)
        pubs[2].send(5)
        pubs[3].send(7)
        pubs[0].send(11)
        #expect(sub2.values == [6, 33])
        #expect(sub3.values == [30, 165])
        #expect(sub4.values == [210, 1155])
    }

    // MARK: Demand

    @Test func demandIsForwardedToEveryUpstreamAndNeverExceeded() {
        let a = Pub(), b = Pub()
        let sub = Pair(initialDemand: .max(1))
        a.combineLatest(b).subscribe(sub)
        // Requested before the upstreams subscribed: each is owed it on subscription.
        #expect(a.subscription.history == [.requested(.max(1))])
        #expect(b.subscription.history == [.requested(.max(1))])

        #expect(a.send(1) == .none)
        #expect(b.send(10) == .none)
        #expect(pairs(sub) == [[1, 10]])

        sub.request(.max(2))
        #expect(a.subscription.history == [.requested(.max(1)), .requested(.max(2))])
        #expect(b.subscription.history == [.requested(.max(1)), .requested(.max(2))])

        b.send(20)
        b.send(30)
        b.send(40)  // demand used up by 20 and 30
        #expect(pairs(sub) == [[1, 10], [1, 20], [1, 30]])
        #expect(sub.demandViolations == 0)
    }

    @Test func unlimitedDemandEmitsEveryCombination() {
        let a = Pub(), b = Pub()
        let sub = Pair(initialDemand: .unlimited)
        a.combineLatest(b).subscribe(sub)
        #expect(a.subscription.history == [.requested(.unlimited)])
        a.send(1)
        b.send(1)
        b.send(2)
        a.send(2)
        #expect(pairs(sub) == [[1, 1], [1, 2], [2, 2]])
    }

    @Test func demandReturnedFromReceiveIsForwarded() {
        let a = Pub(), b = Pub()
        let sub = Pair(initialDemand: .max(1)) { _, _ in .max(2) }
        a.combineLatest(b).subscribe(sub)
        a.send(1)
        // b's value is delivered during b's own send: b gets the new demand as the result,
        // the other upstream gets a request.
        #expect(b.send(10) == .max(2))
        #expect(a.subscription.history == [.requested(.max(1)), .requested(.max(2))])
        #expect(b.subscription.history == [.requested(.max(1))])
        a.send(2)
        a.send(3)
        #expect(pairs(sub) == [[1, 10], [2, 10], [3, 10]])
        #expect(sub.demandViolations == 0)
    }

    @Test func requestFromInsideReceiveIsForwardedToAll() {
        let a = Pub(), b = Pub()
        let sub = Pair(initialDemand: .max(1)) { sub, _ in
            sub.request(.max(1))
            return .none
        }
        a.combineLatest(b).subscribe(sub)
        a.send(1)
        #expect(b.send(10) == .none)
        #expect(a.subscription.history == [.requested(.max(1)), .requested(.max(1))])
        #expect(b.subscription.history == [.requested(.max(1)), .requested(.max(1))])
        a.send(2)
        #expect(pairs(sub) == [[1, 10], [2, 10]])
        #expect(sub.overlaps == 0)
    }

    @Test func aSecondSubscriptionFromAnUpstreamIsCancelled() {
        let a = Pub(), b = Pub()
        let sub = Pair(initialDemand: .unlimited)
        a.combineLatest(b).subscribe(sub)
        let extra = TestSubscription()
        a.resubscribe(with: extra)
        #expect(extra.history == [.cancelled])
        #expect(a.subscription.history == [.requested(.unlimited)])
    }

    // MARK: Completion

    @Test func finishesWhenAllUpstreamsFinishedAndKeepsAFinishedUpstreamsLastValue() {
        let a = Pub(), b = Pub()
        let sub = Pair(initialDemand: .unlimited)
        a.combineLatest(b).subscribe(sub)
        a.send(100)
        a.send(300)
        b.send(1)
        a.send(completion: .finished)
        b.send(2)
        #expect(pairs(sub) == [[300, 1], [300, 2]])
        #expect(sub.completions.isEmpty)
        b.send(completion: .finished)
        #expect(sub.completions == [.finished])
        #expect(a.subscription.history == [.requested(.unlimited)])
    }

    @Test func upstreamFinishingWithoutAValueStillWaitsForTheOthers() {
        // Apple's observed behaviour: no values can come any more, but CombineLatest only
        // finishes once every upstream has.
        let a = Pub(), b = Pub()
        let sub = Pair(initialDemand: .unlimited)
        a.combineLatest(b).subscribe(sub)
        a.send(completion: .finished)
        b.send(1)
        #expect(sub.events.count == 1)
        #expect(b.subscription.history == [.requested(.unlimited)])
        b.send(completion: .finished)
        #expect(sub.values.isEmpty)
        #expect(sub.completions == [.finished])
    }

    @Test(arguments: 0..<3)
    func failureIsForwardedAtOnceAndCancelsTheOtherUpstreams(failing: Int) {
        let pubs = [Pub(), Pub(), Pub()]
        let sub = TestSubscriber<(Int, Int, Int), OperatorTestError>(initialDemand: .max(1))
        pubs[0].combineLatest(pubs[1], pubs[2]).subscribe(sub)
        for pub in pubs { pub.send(1) }
        pubs[failing].send(2)  // no demand left: recorded, not emitted
        pubs[failing].send(completion: .failure(OperatorTestError(failing)))
        #expect(sub.values.count == 1)
        #expect(sub.completions == [.failure(OperatorTestError(failing))])
        for index in 0..<3 {
            let expected: [TestSubscription.Event] =
                index == failing ? [.requested(.max(1))] : [.requested(.max(1)), .cancelled]
            #expect(pubs[index].subscription.history == expected)
        }
        for pub in pubs {
            #expect(pub.send(3) == .none)
            pub.send(completion: .finished)
        }
        sub.request(.max(1))
        #expect(sub.values.count == 1)
        #expect(sub.completions.count == 1)
        #expect(pubs[failing].subscription.history == [.requested(.max(1))])  // nothing forwarded
    }

    // MARK: Cancellation and re-entrancy

    @Test func cancelCancelsEveryUpstreamAndStopsDelivery() {
        let a = Pub(), b = Pub()
        let sub = Pair(initialDemand: .max(5))
        a.combineLatest(b).subscribe(sub)
        a.send(1)
        b.send(1)
        sub.cancel()
        #expect(a.subscription.history == [.requested(.max(5)), .cancelled])
        #expect(b.subscription.history == [.requested(.max(5)), .cancelled])
        a.send(2)
        b.send(completion: .finished)
        sub.request(.max(1))
        sub.cancel()
        #expect(pairs(sub) == [[1, 1]])
        #expect(sub.completions.isEmpty)
        #expect(a.subscription.history == [.requested(.max(5)), .cancelled])
    }

    @Test func cancelFromInsideReceiveStopsTheRest() {
        let a = PassthroughSubject<Int, OperatorTestError>(), b = PassthroughSubject<Int, OperatorTestError>()
        let sub = Pair(initialDemand: .unlimited) { sub, _ in
            a.send(5)  // re-entrant: recorded, not emitted
            sub.cancel()
            return .none
        }
        a.combineLatest(b).subscribe(sub)
        a.send(1)
        b.send(1)
        a.send(2)
        #expect(pairs(sub) == [[1, 1]])
        #expect(sub.completions.isEmpty)
    }

    // MARK: Just / Empty / Fail upstreams

    @Test func justEmptyFailAndSequenceUpstreams() {
        let justs = TestSubscriber<(Int, Int), Never>(initialDemand: .unlimited)
        Just(1).combineLatest(Just(2)).subscribe(justs)
        #expect(pairs(justs) == [[1, 2]])
        #expect(justs.completions == [.finished])

        let empty = TestSubscriber<(Int, Int), Never>(initialDemand: .unlimited)
        Just(1).combineLatest(Empty<Int, Never>()).subscribe(empty)
        #expect(empty.values.isEmpty)
        #expect(empty.completions == [.finished])

        let later = Pub()
        let failed = Pair(initialDemand: .unlimited)
        Fail<Int, OperatorTestError>(error: OperatorTestError(1)).combineLatest(later).subscribe(failed)
        #expect(failed.events.count == 2)
        #expect(failed.completions == [.failure(OperatorTestError(1))])
        #expect(!later.isSubscribed)

        let sequences = TestSubscriber<(Int, Int), Never>(initialDemand: .unlimited)
        [1, 2, 3].publisher.combineLatest([10, 20].publisher).subscribe(sequences)
        #expect(pairs(sequences) == [[3, 10], [3, 20]])
        #expect(sequences.completions == [.finished])
    }

    @Test func equatableWhenUpstreamsAre() {
        #expect(Publishers.CombineLatest(Just(1), Just(2)) == Publishers.CombineLatest(Just(1), Just(2)))
        #expect(Publishers.CombineLatest(Just(1), Just(2)) != Publishers.CombineLatest(Just(1), Just(3)))
        #expect(Publishers.CombineLatest3(Just(1), Just(2), Just(3))
            == Publishers.CombineLatest3(Just(1), Just(2), Just(3)))
        #expect(Publishers.CombineLatest4(Just(1), Just(2), Just(3), Just(4))
            != Publishers.CombineLatest4(Just(1), Just(2), Just(3), Just(5)))
    }

    // MARK: Threads

    @Test func fourThreadsThroughCombineLatest4() {
        let perThread = 10_000
        let subjects = (0..<4).map { _ in PassthroughSubject<Int, Never>() }
        let sub = TestSubscriber<(Int, Int, Int, Int), Never>(initialDemand: .unlimited)
        subjects[0].combineLatest(subjects[1], subjects[2], subjects[3]).subscribe(sub)
        for subject in subjects { subject.send(-1) }  // one combination: (-1, -1, -1, -1)
        nonisolated(unsafe) let senders = subjects
        runConcurrently(threads: 4) { thread in
            for value in 0..<perThread { senders[thread].send(value) }
            senders[thread].send(completion: .finished)
        }
        let outputs = sub.values.map { [$0.0, $0.1, $0.2, $0.3] }
        // Every value after the first combination emits exactly one combination...
        #expect(outputs.count == 1 + 4 * perThread)
        #expect(outputs.last == Array(repeating: perThread - 1, count: 4))
        // ...in which each upstream's value only moves forward, one step at a time.
        for component in 0..<4 {
            let seen = outputs.map { $0[component] }
            #expect(zip(seen, seen.dropFirst()).allSatisfy { $1 == $0 || $1 == $0 + 1 })
        }
        #expect(sub.completions == [.finished])
        #expect(sub.overlaps == 0)
    }
}
