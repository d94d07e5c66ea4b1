import EventBusKit
import Foundation
import Testing

private typealias Pub = TestPublisher<Int, OperatorTestError>
private typealias Sub = TestSubscriber<Int, OperatorTestError>

/// A value tagged with the upstream that sent it, to check per-upstream order.
private struct Tagged: Equatable, Sendable {
    let source: Int
    let sequence: Int
}

@Suite("Merge")
struct MergeTests {
    // MARK: Demand

    @Test func unlimitedDemandIsForwardedAndValuesArriveInOrder() {
        let a = Pub(), b = Pub()
        let sub = Sub(initialDemand: .unlimited)
        Publishers.Merge(a, b).subscribe(sub)

        // The downstream asked for .unlimited before the upstreams were subscribed.
        #expect(a.subscription.history == [.requested(.unlimited)])
        #expect(b.subscription.history == [.requested(.unlimited)])
        #expect(a.send(1) == .none)
        #expect(b.send(2) == .none)
        #expect(a.send(3) == .none)
        #expect(sub.events == [.subscription, .value(1), .value(2), .value(3)])
        #expect(sub.subscriptionCount == 1)
    }

    @Test func boundedDemandGrantsOneValuePerUpstreamAndServesSlotsInIndexOrder() {
        let a = Pub(), b = Pub()
        let sub = Sub(initialDemand: .max(1))
        Publishers.Merge(a, b).subscribe(sub)
        #expect(a.subscription.history == [.requested(.max(1))])
        #expect(b.subscription.history == [.requested(.max(1))])

        #expect(a.send(1) == .max(1))  // delivered at once: grant renewed through the result
        #expect(b.send(2) == .none)  // no demand left: waits in b's slot
        #expect(a.send(3) == .none)  // waits in a's slot
        #expect(sub.events == [.subscription, .value(1)])

        sub.request(.max(1))  // slots are served in upstream index order: a's first
        #expect(sub.events == [.subscription, .value(1), .value(3)])
        #expect(a.subscription.history == [.requested(.max(1)), .requested(.max(1))])
        #expect(b.subscription.history == [.requested(.max(1))])

        sub.request(.max(5))  // 4 left after b's 2
        #expect(sub.events == [.subscription, .value(1), .value(3), .value(2)])
        #expect(b.subscription.history == [.requested(.max(1)), .requested(.max(1))])
        #expect(a.send(4) == .max(1))
        #expect(b.send(5) == .max(1))
        #expect(sub.values == [1, 3, 2, 4, 5])
        #expect(sub.demandViolations == 0)
    }

    @Test func demandReturnedFromReceiveIsHonoured() {
        // 2 requested + 1 returned for the value 1: exactly three values until more is requested.
        let sub = TestSubscriber<Int, Never>(initialDemand: .max(2)) { _, value in
            value == 1 ? .max(1) : .none
        }
        Publishers.Merge([1, 2, 3].publisher, [10, 20].publisher).subscribe(sub)
        #expect(sub.events == [.subscription, .value(1), .value(2), .value(3)])

        sub.request(.max(1))
        #expect(sub.values == [1, 2, 3, 10])
        #expect(sub.completions.isEmpty)

        sub.request(.max(1))
        #expect(sub.events == [
            .subscription, .value(1), .value(2), .value(3), .value(10), .value(20),
            .completion(.finished),
        ])
        #expect(sub.demandViolations == 0)
    }

    @Test func switchingToUnlimitedForwardsUnlimitedAndFlushesTheBuffer() {
        let a = Pub(), b = Pub()
        let sub = Sub(initialDemand: .max(1))
        Publishers.Merge(a, b).subscribe(sub)
        #expect(a.send(1) == .max(1))
        #expect(b.send(2) == .none)

        sub.request(.unlimited)
        #expect(sub.values == [1, 2])
        #expect(a.subscription.history == [.requested(.max(1)), .requested(.unlimited)])
        #expect(b.subscription.history == [.requested(.max(1)), .requested(.unlimited)])
        #expect(b.send(3) == .none)  // no more grants once unlimited
        #expect(sub.values == [1, 2, 3])
    }

    @Test func requestOfZeroIsIgnored() {
        let a = Pub(), b = Pub()
        let sub = Sub()
        Publishers.Merge(a, b).subscribe(sub)
        a.send(1)
        sub.request(.none)
        #expect(sub.events == [.subscription])
    }

    // MARK: Completion

    @Test func finishesOnlyWhenAllUpstreamsFinished() {
        let a = Pub(), b = Pub()
        let sub = Sub(initialDemand: .unlimited)
        Publishers.Merge(a, b).subscribe(sub)
        a.send(1)
        a.send(completion: .finished)
        #expect(sub.events == [.subscription, .value(1)])
        #expect(a.send(9) == .none)  // after its completion: ignored
        b.send(2)
        #expect(sub.events == [.subscription, .value(1), .value(2)])
        b.send(completion: .finished)
        #expect(sub.events == [.subscription, .value(1), .value(2), .completion(.finished)])
        // Finished upstreams are not cancelled.
        #expect(a.subscription.history == [.requested(.unlimited)])
        #expect(b.subscription.history == [.requested(.unlimited)])
    }

    @Test func finishWaitsUntilWaitingValuesAreDelivered() {
        let a = Pub(), b = Pub()
        let sub = Sub()
        Publishers.Merge(a, b).subscribe(sub)
        a.send(1)
        b.send(2)
        a.send(completion: .finished)
        b.send(completion: .finished)
        #expect(sub.events == [.subscription])

        sub.request(.max(1))
        #expect(sub.events == [.subscription, .value(1)])
        sub.request(.max(1))
        #expect(sub.events == [.subscription, .value(1), .value(2), .completion(.finished)])
        // Finished upstreams get no new grant.
        #expect(a.subscription.history == [.requested(.max(1))])
        #expect(b.subscription.history == [.requested(.max(1))])
    }

    @Test(arguments: 0..<3)
    func failureIsForwardedAtOnceAndCancelsTheOtherUpstreams(failing: Int) {
        let pubs = [Pub(), Pub(), Pub()]
        let sub = Sub()  // no demand: a failure needs none, and waiting values are dropped
        Publishers.Merge3(pubs[0], pubs[1], pubs[2]).subscribe(sub)
        pubs[(failing + 1) % 3].send(7)

        pubs[failing].send(completion: .failure(OperatorTestError(failing)))
        #expect(sub.events == [.subscription, .completion(.failure(OperatorTestError(failing)))])
        for index in 0..<3 {
            // Every upstream is cancelled, the failed one included (as in Combine).
            #expect(pubs[index].subscription.history == [.requested(.max(1)), .cancelled])
        }

        // Nothing after the completion.
        for pub in pubs {
            #expect(pub.send(8) == .none)
            pub.send(completion: .finished)
        }
        sub.request(.max(5))
        #expect(sub.events == [.subscription, .completion(.failure(OperatorTestError(failing)))])
    }

    @Test func failureAfterOneUpstreamFinishedStillFails() {
        let a = Pub(), b = Pub()
        let sub = Sub(initialDemand: .unlimited)
        Publishers.Merge(a, b).subscribe(sub)
        a.send(completion: .finished)
        b.send(completion: .failure(OperatorTestError(2)))
        #expect(sub.events == [.subscription, .completion(.failure(OperatorTestError(2)))])
        #expect(a.subscription.history == [.requested(.unlimited)])  // finished: not cancelled
    }

    @Test func atMostOneCompletionEvenFromMisbehavingUpstreams() {
        let a = Pub(), b = Pub()
        let sub = Sub(initialDemand: .unlimited)
        Publishers.Merge(a, b).subscribe(sub)
        a.send(completion: .finished)
        a.send(completion: .finished)  // a second finish must not count as b's
        #expect(sub.completions.isEmpty)
        b.send(completion: .finished)
        a.send(completion: .failure(OperatorTestError(1)))
        b.send(completion: .failure(OperatorTestError(2)))
        #expect(sub.events == [.subscription, .completion(.finished)])

        let c = Pub(), d = Pub()
        let failed = Sub(initialDemand: .unlimited)
        Publishers.Merge(c, d).subscribe(failed)
        c.send(completion: .failure(OperatorTestError(1)))
        d.send(completion: .failure(OperatorTestError(2)))
        c.send(completion: .finished)
        #expect(failed.events == [.subscription, .completion(.failure(OperatorTestError(1)))])
    }

    // MARK: Cancellation

    @Test func cancelCancelsEveryUpstreamAndStopsDelivery() {
        let a = Pub(), b = Pub()
        let sub = Sub(initialDemand: .unlimited)
        Publishers.Merge(a, b).subscribe(sub)
        a.send(1)
        sub.cancel()
        #expect(a.subscription.history == [.requested(.unlimited), .cancelled])
        #expect(b.subscription.history == [.requested(.unlimited), .cancelled])

        #expect(a.send(2) == .none)
        b.send(3)
        b.send(completion: .finished)
        a.send(completion: .failure(OperatorTestError(1)))
        sub.cancel()  // idempotent
        #expect(sub.events == [.subscription, .value(1)])
        #expect(a.subscription.history == [.requested(.unlimited), .cancelled])
    }

    @Test func cancelDropsWaitingValues() {
        let a = Pub(), b = Pub()
        let sub = Sub()
        Publishers.Merge(a, b).subscribe(sub)
        a.send(1)
        b.send(2)
        sub.cancel()
        sub.request(.max(2))
        #expect(sub.events == [.subscription])
        #expect(a.subscription.history == [.requested(.max(1)), .cancelled])
    }

    @Test func cancelAfterCompletionDoesNotReachUpstreams() {
        let a = Pub(), b = Pub()
        let sub = Sub(initialDemand: .unlimited)
        Publishers.Merge(a, b).subscribe(sub)
        a.send(completion: .finished)
        b.send(completion: .finished)
        sub.cancel()
        #expect(a.subscription.history == [.requested(.unlimited)])
        #expect(b.subscription.history == [.requested(.unlimited)])
    }

    @Test func aSecondSubscriptionFromAnUpstreamIsCancelled() {
        let a = Pub(), b = Pub()
        let sub = Sub(initialDemand: .unlimited)
        Publishers.Merge(a, b).subscribe(sub)
        let extra = TestSubscription()
        a.resubscribe(with: extra)
        #expect(extra.history == [.cancelled])
        #expect(a.subscription.history == [.requested(.unlimited)])
        a.send(1)
        #expect(sub.values == [1])
    }

    // MARK: Re-entrancy

    @Test func valueSentFromInsideReceiveIsDeliveredAfterwardsNotNested() {
        let a = PassthroughSubject<Int, OperatorTestError>(), b = PassthroughSubject<Int, OperatorTestError>()
        let sub = Sub(initialDemand: .unlimited) { _, value in
            if value == 1 {
                b.send(2)
                b.send(3)
            }
            return .none
        }
        Publishers.Merge(a, b).subscribe(sub)
        a.send(1)
        a.send(4)
        #expect(sub.values == [1, 2, 3, 4])
        #expect(sub.overlaps == 0)
    }

    @Test func cancelFromInsideReceiveStopsTheRest() {
        let a = Pub(), b = Pub()
        let sub = Sub { sub, _ in
            sub.cancel()
            return .none
        }
        Publishers.Merge(a, b).subscribe(sub)
        a.send(1)
        b.send(2)
        sub.request(.max(5))
        #expect(sub.events == [.subscription, .value(1)])
        #expect(a.subscription.history == [.requested(.max(1)), .cancelled])
        #expect(b.subscription.history == [.requested(.max(1)), .cancelled])
    }

    @Test func requestFromInsideReceiveDeliversTheNextBufferedValue() {
        let a = Pub(), b = Pub()
        let sub = Sub { sub, value in
            if value < 3 { sub.request(.max(1)) }
            return .none
        }
        Publishers.Merge(a, b).subscribe(sub)
        a.send(1)
        b.send(2)
        sub.request(.max(1))
        #expect(sub.values == [1, 2])  // 1 requested + 1 requested from inside for 1
        a.send(3)  // the demand requested from inside for 2
        a.send(4)
        #expect(sub.values == [1, 2, 3])
        #expect(sub.overlaps == 0)
        #expect(sub.demandViolations == 0)
    }

    @Test func completionFromInsideReceiveIsDeliveredAfterwards() {
        let a = PassthroughSubject<Int, OperatorTestError>(), b = PassthroughSubject<Int, OperatorTestError>()
        let sub = Sub(initialDemand: .unlimited) { _, _ in
            a.send(completion: .finished)
            b.send(completion: .failure(OperatorTestError(1)))
            return .none
        }
        Publishers.Merge(a, b).subscribe(sub)
        a.send(1)
        #expect(sub.events == [.subscription, .value(1), .completion(.failure(OperatorTestError(1)))])
        #expect(sub.overlaps == 0)
    }

    // MARK: Empty / Just / Fail upstreams

    @Test func justAndEmptyUpstreams() {
        let sub = TestSubscriber<Int, Never>(initialDemand: .unlimited)
        Just(1).merge(with: Empty<Int, Never>()).subscribe(sub)
        #expect(sub.events == [.subscription, .value(1), .completion(.finished)])

        let empty = TestSubscriber<Int, Never>()
        Publishers.Merge(Empty<Int, Never>(), Empty<Int, Never>()).subscribe(empty)
        #expect(empty.events == [.subscription, .completion(.finished)])
    }

    @Test func failUpstream() {
        let sub = Sub(initialDemand: .unlimited)
        Just(1).setFailureType(to: OperatorTestError.self).merge(with: Fail(error: OperatorTestError(1)))
            .subscribe(sub)
        #expect(sub.events == [.subscription, .value(1), .completion(.failure(OperatorTestError(1)))])

        // Failing while being subscribed: later upstreams are not even subscribed.
        let later = Pub()
        let failed = Sub()
        Fail<Int, OperatorTestError>(error: OperatorTestError(2)).merge(with: later).subscribe(failed)
        #expect(failed.events == [.subscription, .completion(.failure(OperatorTestError(2)))])
        #expect(!later.isSubscribed)
    }

    @Test func mergeManyOfJustsRespectsDemand() {
        let sub = TestSubscriber<Int, Never>(initialDemand: .max(2))
        Publishers.MergeMany(Just(1), Just(2), Just(3)).subscribe(sub)
        #expect(sub.events == [.subscription, .value(1), .value(2)])  // all finished, 3 waits
        sub.request(.max(1))
        #expect(sub.events == [.subscription, .value(1), .value(2), .value(3), .completion(.finished)])
    }

    @Test func mergeManyOfNothingFinishesAtOnce() {
        let sub = TestSubscriber<Int, Never>()
        Publishers.MergeMany([Just<Int>]()).subscribe(sub)
        #expect(sub.events == [.subscription, .completion(.finished)])
    }

    // MARK: Arities and API

    @Test func merge3Merge4AndMergeManyDeliverFromEveryUpstream() {
        let three = (0..<3).map { _ in Pub() }
        let sub3 = Sub(initialDemand: .unlimited)
        let merge3: Publishers.Merge3<Pub, Pub, Pub> = three[0].merge(with: three[1], three[2])
        merge3.subscribe(sub3)
        for (index, pub) in three.enumerated().reversed() { pub.send(index) }
        for pub in three { pub.send(completion: .finished) }
        #expect(sub3.events == [.subscription, .value(2), .value(1), .value(0), .completion(.finished)])

        let four = (0..<4).map { _ in Pub() }
        let sub4 = Sub(initialDemand: .unlimited)
        let merge4: Publishers.Merge4<Pub, Pub, Pub, Pub> =
            four[0].merge(with: four[1], four[2], four[3])
        merge4.subscribe(sub4)
        for (index, pub) in four.enumerated() { pub.send(index) }
        for pub in four.dropLast() { pub.send(completion: .finished) }
        #expect(sub4.events == [.subscription, .value(0), .value(1), .value(2), .value(3)])
        four[3].send(completion: .finished)
        #expect(sub4.completions == [.finished])

        let five = (0..<5).map { _ in Pub() }
        let many = Sub(initialDemand: .unlimited)
        Publishers.MergeMany(five).subscribe(many)
        for (index, pub) in five.enumerated() { pub.send(index * 10) }
        for pub in five { pub.send(completion: .finished) }
        #expect(many.events == [
            .subscription, .value(0), .value(10), .value(20), .value(30), .value(40),
            .completion(.finished),
        ])
    }

    @Test func overloadsReturnCombinesTypes() {
        let a = Pub(), b = Pub(), c = Pub()
        let just = Just(1), empty = Empty<Int, Never>()
        let two: Publishers.Merge<Just<Int>, Empty<Int, Never>> = just.merge(with: empty)
        let chained: Publishers.Merge3<Just<Int>, Empty<Int, Never>, Just<Int>> =
            two.merge(with: just)
        let chained4: Publishers.Merge4<Just<Int>, Empty<Int, Never>, Just<Int>, Empty<Int, Never>> =
            chained.merge(with: empty)
        let pairThenTwo: Publishers.Merge4<Just<Int>, Empty<Int, Never>, Just<Int>, Just<Int>> =
            two.merge(with: just, just)
        let sameType: Publishers.MergeMany<Pub> = a.merge(with: b)
        let extended: Publishers.MergeMany<Pub> = sameType.merge(with: c)
        #expect(extended.publishers.count == 3)
        #expect(extended.publishers[2] === c)
        // Without annotations, overload resolution picks what Combine's does.
        #expect(type(of: a.merge(with: b)) == Publishers.MergeMany<Pub>.self)
        #expect(type(of: just.merge(with: empty).merge(with: just))
            == Publishers.Merge3<Just<Int>, Empty<Int, Never>, Just<Int>>.self)

        let sub = TestSubscriber<Int, Never>(initialDemand: .unlimited)
        chained4.subscribe(sub)
        #expect(sub.events == [.subscription, .value(1), .value(1), .completion(.finished)])
        let sub2 = TestSubscriber<Int, Never>(initialDemand: .unlimited)
        pairThenTwo.subscribe(sub2)
        #expect(sub2.values == [1, 1, 1])
    }

    @Test func equatableWhenUpstreamsAre() {
        #expect(Publishers.Merge(Just(1), Just(2)) == Publishers.Merge(Just(1), Just(2)))
        #expect(Publishers.Merge(Just(1), Just(2)) != Publishers.Merge(Just(1), Just(3)))
        #expect(Publishers.Merge4(Just(1), Just(2), Just(3), Just(4))
            == Publishers.Merge4(Just(1), Just(2), Just(3), Just(4)))
        #expect(Publishers.MergeMany(Just(1), Just(2)) == Publishers.MergeMany([Just(1), Just(2)]))
        #expect(Publishers.MergeMany(Just(1), Just(2)) != Publishers.MergeMany(Just(2), Just(1)))
    }

    // MARK: Threads

    private static let perThread = 10_000

    private func checkPerUpstreamOrder(_ values: [Tagged], upstreams: Int) {
        #expect(values.count == upstreams * Self.perThread)
        for source in 0..<upstreams {
            let sequence = values.filter { $0.source == source }.map(\.sequence)
            #expect(sequence == Array(0..<Self.perThread), "upstream \(source) out of order")
        }
    }

    @Test func fourThreadsThroughMerge4() {
        let subjects = (0..<4).map { _ in PassthroughSubject<Tagged, Never>() }
        let sub = TestSubscriber<Tagged, Never>(initialDemand: .unlimited)
        Publishers.Merge4(subjects[0], subjects[1], subjects[2], subjects[3]).subscribe(sub)
        nonisolated(unsafe) let senders = subjects
        runConcurrently(threads: 4) { thread in
            for sequence in 0..<Self.perThread {
                senders[thread].send(Tagged(source: thread, sequence: sequence))
            }
            senders[thread].send(completion: .finished)
        }
        checkPerUpstreamOrder(sub.values, upstreams: 4)
        #expect(sub.completions == [.finished])
        #expect(sub.overlaps == 0)
    }

    @Test func fourThreadsThroughMergeMany() {
        let subjects = (0..<4).map { _ in PassthroughSubject<Tagged, Never>() }
        let sub = TestSubscriber<Tagged, Never>(initialDemand: .unlimited)
        Publishers.MergeMany(subjects).subscribe(sub)
        nonisolated(unsafe) let senders = subjects
        runConcurrently(threads: 4) { thread in
            for sequence in 0..<Self.perThread {
                senders[thread].send(Tagged(source: thread, sequence: sequence))
            }
            senders[thread].send(completion: .finished)
        }
        checkPerUpstreamOrder(sub.values, upstreams: 4)
        #expect(sub.completions == [.finished])
        #expect(sub.overlaps == 0)
    }

    @Test func fourProducerQueuesUnderBoundedDemand() throws {
        // Each upstream produces only when asked, on its own queue; grants are renewed from
        // whichever thread delivers. Bounded demand: at most 3 outstanding at any time.
        let upstreams = (0..<4).map { source in
            (0..<Self.perThread).publisher
                .map { Tagged(source: source, sequence: $0) }
                .subscribe(on: DispatchQueue(label: "merge-producer-\(source)").ocombine)
        }
        let sub = TestSubscriber<Tagged, Never>(initialDemand: .max(3)) { _, _ in .max(1) }
        Publishers.MergeMany(upstreams).subscribe(sub)
        let deadline = Date().addingTimeInterval(60)
        while sub.completions.isEmpty, Date() < deadline { usleep(2_000) }

        checkPerUpstreamOrder(sub.values, upstreams: 4)
        #expect(sub.completions == [.finished])
        #expect(sub.overlaps == 0)
        #expect(sub.demandViolations == 0)
    }

    @Test func cancelFromAnotherThreadStopsDeliveryBarTheOneInFlight() {
        let subjects = (0..<2).map { _ in PassthroughSubject<Tagged, Never>() }
        let sub = TestSubscriber<Tagged, Never>(initialDemand: .unlimited)
        Publishers.Merge(subjects[0], subjects[1]).subscribe(sub)
        nonisolated(unsafe) let senders = subjects
        let countAtCancel = SharedBox(0)
        let sentAfterCancel = SharedBox(0)
        let stop = SharedBox(false)
        runConcurrently(threads: 3) { thread in
            if thread == 2 {
                while sub.values.count < 1_000 { sched_yield() }
                sub.cancel()
                countAtCancel.value = sub.values.count
                // Let the senders go on for a while, so values do arrive after the cancel.
                while sentAfterCancel.value < 1_000 { sched_yield() }
                stop.value = true
            } else {
                var sequence = 0
                while !stop.value {
                    senders[thread].send(Tagged(source: thread, sequence: sequence))
                    sequence += 1
                    if countAtCancel.value > 0 { sentAfterCancel.value += 1 }
                }
            }
        }
        // A delivery that had started before cancel() may still finish; none may start after.
        #expect(sub.values.count - countAtCancel.value <= 1)
        #expect(sub.overlaps == 0)
    }
}
