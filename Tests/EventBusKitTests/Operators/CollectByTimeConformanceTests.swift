import EventBusKit
import Foundation
import Testing

private typealias Pub = TestPublisher<Int, OperatorTestError>
private typealias Sub = TestSubscriber<[Int], OperatorTestError>
private typealias Clock = VirtualTimeScheduler

/// `collect(_:options:)` against Apple's Combine (macOS 10.15.2 / iOS 13.3 and later), as
/// CombineX's specs recorded it running on real Combine — `CollectByTimeSpec` and
/// `VersioningCollectByTimeSpec` — on a virtual clock; plus the SDK's choices where Combine's
/// behaviour is not recorded (values collected without demand are kept, not lost).
@Suite("CollectByTime conformance with Combine")
struct CollectByTimeConformanceTests {
    // MARK: 1. Collecting by time; what a completion does with the window

    @Test func byTimeSendsEachWindowAtItsTickAndAFailureDropsTheOpenWindow() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited)
        pub.collect(.byTime(clock, .seconds(2))).subscribe(sub)
        pub.send(1)
        pub.send(2)
        clock.advance(by: .seconds(2))
        #expect(sub.values == [[1, 2]])
        pub.send(3)
        pub.send(4)
        pub.send(5)
        clock.advance(by: .seconds(1))  // no tick yet
        pub.send(completion: .failure(OperatorTestError(1)))
        clock.advance(by: .zero)
        #expect(sub.events == [.subscription, .value([1, 2]), .completion(.failure(OperatorTestError(1)))])
    }

    @Test func byTimeSendsTheOpenWindowBeforeFinishing() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited)
        pub.collect(.byTime(clock, .seconds(2))).subscribe(sub)
        pub.send(1)
        pub.send(2)
        clock.advance(by: .seconds(2))
        pub.send(3)
        pub.send(4)
        pub.send(5)
        clock.advance(by: .seconds(1))
        pub.send(completion: .finished)
        clock.advance(by: .zero)
        #expect(sub.events == [.subscription, .value([1, 2]), .value([3, 4, 5]), .completion(.finished)])
    }

    // MARK: 2. Everything downstream goes through the scheduler (since 13.3)

    @Test func aFinishIsDeliveredThroughTheScheduler() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited)
        pub.collect(.byTime(clock, .seconds(2))).subscribe(sub)
        pub.send(1)
        pub.send(completion: .finished)
        #expect(sub.events == [.subscription])
        clock.advance(by: .zero)
        #expect(sub.events == [.subscription, .value([1]), .completion(.finished)])
    }

    @Test func aFailureIsDeliveredThroughTheSchedulerWithoutTheWindow() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited)
        pub.collect(.byTime(clock, .seconds(2))).subscribe(sub)
        pub.send(1)
        pub.send(completion: .failure(OperatorTestError(2)))
        #expect(sub.events == [.subscription])
        clock.advance(by: .zero)
        #expect(sub.events == [.subscription, .completion(.failure(OperatorTestError(2)))])
    }

    @Test func aFullWindowIsDeliveredThroughTheSchedulerNotInsideTheUpstreamsReceive() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited)
        pub.collect(.byTimeOrCount(clock, .seconds(1), 2)).subscribe(sub)
        pub.send(1)
        pub.send(2)
        #expect(sub.values.isEmpty)
        clock.advance(by: .zero)
        #expect(sub.values == [[1, 2]])
    }

    // MARK: 3. By time or count

    @Test func byTimeOrCountSendsFullWindowsAtOnceAndTheRestAtTheTick() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited)
        pub.collect(.byTimeOrCount(clock, .seconds(2), 2)).subscribe(sub)
        pub.send(1)
        pub.send(2)
        pub.send(3)
        clock.advance(by: .seconds(2))
        pub.send(4)
        pub.send(5)
        pub.send(6)
        pub.send(7)
        pub.send(8)
        clock.advance(by: .seconds(2))
        pub.send(completion: .finished)
        clock.advance(by: .zero)
        #expect(sub.events == [
            .subscription, .value([1, 2]), .value([3]), .value([4, 5]), .value([6, 7]), .value([8]),
            .completion(.finished),
        ])
    }

    @Test func aCountClosedWindowDoesNotResetTheTick() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited)
        pub.collect(.byTimeOrCount(clock, .seconds(2), 2)).subscribe(sub)
        clock.advance(by: .seconds(1))
        pub.send(1)
        pub.send(2)  // closed at t = 1 s
        pub.send(3)
        clock.advance(by: .seconds(1))  // t = 2 s: the tick armed at subscription
        #expect(sub.values == [[1, 2], [3]])
        pub.send(4)
        clock.advance(by: .milliseconds(1_999))
        #expect(sub.values == [[1, 2], [3]])
        clock.advance(by: .milliseconds(1))  // t = 4 s
        #expect(sub.values == [[1, 2], [3], [4]])
    }

    @Test(arguments: [false, true])
    func aTickWithNothingCollectedSendsNothing(withCount: Bool) {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited)
        let strategy: Publishers.TimeGroupingStrategy<Clock> =
            withCount ? .byTimeOrCount(clock, .seconds(1), 3) : .byTime(clock, .seconds(1))
        pub.collect(strategy).subscribe(sub)
        clock.advance(by: .seconds(5))
        #expect(sub.values.isEmpty)
        pub.send(1)
        clock.advance(by: .seconds(5))
        #expect(sub.values == [[1]])
    }

    // MARK: 4. Demand with .byTime

    @Test func byTimePullsOneItemAtATimeAndSendsOnlyWhileThereIsDemand() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .max(2)) { _, array in
            Set(array).isDisjoint(with: [0, 5]) ? .none : .max(1)
        }
        pub.collect(.byTime(clock, .seconds(1))).subscribe(sub)
        var returned: [Subscribers.Demand] = []
        for value in 0..<100 {
            if value.isMultiple(of: 3) { clock.advance(by: .seconds(1)) }
            returned.append(pub.send(value))
        }
        #expect(sub.values == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]])
        #expect(pub.subscription.history == [.requested(.max(1))])
        #expect(returned == Array(repeating: .max(1), count: 100))

        sub.request(.max(2))  // one more item asked for upstream, whatever the amount
        #expect(pub.subscription.history == [.requested(.max(1)), .requested(.max(1))])
        #expect(sub.demandViolations == 0)
    }

    /// Combine's one upstream request per downstream request (the recorded 101 requests above:
    /// one for the initial `.max(2)`, none of its own at subscription) means nothing is asked for
    /// before the downstream asks.
    @Test func byTimeAsksTheUpstreamForNothingUntilTheDownstreamRequests() {
        let pub = Pub(), clock = Clock()
        let sub = Sub()
        pub.collect(.byTime(clock, .seconds(1))).subscribe(sub)
        clock.advance(by: .seconds(2))
        #expect(pub.subscription.history.isEmpty)
        sub.request(.max(3))
        #expect(pub.subscription.history == [.requested(.max(1))])
        sub.request(.none)  // ignored
        #expect(pub.subscription.history == [.requested(.max(1))])
    }

    /// The SDK's choice where Combine's is not recorded: items collected while the downstream has
    /// no demand are not dropped; they go, with what arrived since, at the first tick with demand.
    @Test func itemsCollectedWithoutDemandGoAtTheFirstTickThatHasDemand() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .max(1))
        pub.collect(.byTime(clock, .seconds(1))).subscribe(sub)
        pub.send(1)
        clock.advance(by: .seconds(1))
        #expect(sub.values == [[1]])
        pub.send(2)
        clock.advance(by: .seconds(1))  // no demand: nothing goes, nothing is lost
        pub.send(3)
        clock.advance(by: .seconds(1))
        #expect(sub.values == [[1]])
        sub.request(.max(1))
        clock.advance(by: .zero)  // not on the request: on the next tick
        #expect(sub.values == [[1]])
        pub.send(4)
        clock.advance(by: .seconds(1))
        #expect(sub.values == [[1], [2, 3, 4]])
        #expect(sub.demandViolations == 0)
    }

    @Test func aFinishWaitsForDemandForTheLastWindow() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .max(1))
        pub.collect(.byTime(clock, .seconds(1))).subscribe(sub)
        pub.send(1)
        clock.advance(by: .seconds(1))
        pub.send(2)
        pub.send(completion: .finished)
        clock.advance(by: .seconds(3))
        #expect(sub.events == [.subscription, .value([1])])
        sub.request(.max(1))
        #expect(sub.events == [.subscription, .value([1])])  // through the scheduler
        clock.advance(by: .zero)
        #expect(sub.events == [.subscription, .value([1]), .value([2]), .completion(.finished)])
        #expect(sub.demandViolations == 0)
    }

    // MARK: 5. Demand with .byTimeOrCount

    @Test func byTimeOrCountRequestsCountTimesTheDemandAndRenewsItOnlyForFullWindows() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .max(2)) { _, array in
            if array.contains(0) { return .max(1) }
            if array.contains(2) { return .max(5) }
            return .none
        }
        pub.collect(.byTimeOrCount(clock, .seconds(1), 2)).subscribe(sub)
        let upstream = DemandRespectingSender(pub)
        for value in 0..<100 {
            if value.isMultiple(of: 3) { clock.advance(by: .seconds(1)) }
            upstream.send(value)
        }
        // [0, 1] was closed by count: its .max(1) renews 2 items; [2] was cut by the tick: its
        // .max(5) is downstream demand only.
        #expect(pub.subscription.history == [.requested(.max(4)), .requested(.max(2))])
        #expect(upstream.returned == Array(repeating: .none, count: 6))
        #expect(sub.values == [[0, 1], [2], [3, 4], [5]])
        #expect(sub.demandViolations == 0)
    }

    @Test func aFullWindowWithoutDemandWaitsForTheNextRequest() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .max(2))
        pub.collect(.byTimeOrCount(clock, .seconds(1), 2)).subscribe(sub)
        #expect(pub.subscription.history == [.requested(.max(4))])
        pub.send(1)
        clock.advance(by: .seconds(1))
        pub.send(2)
        clock.advance(by: .seconds(1))
        #expect(sub.values == [[1], [2]])  // the demand is used up by the ticks
        pub.send(3)
        pub.send(4)  // within the 4 requested: closed, but no demand for it
        clock.advance(by: .seconds(3))
        #expect(sub.values == [[1], [2]])
        sub.request(.max(1))
        #expect(pub.subscription.history == [.requested(.max(4)), .requested(.max(2))])
        #expect(sub.values == [[1], [2]])  // through the scheduler
        clock.advance(by: .zero)
        #expect(sub.values == [[1], [2], [3, 4]])
        #expect(sub.demandViolations == 0)
    }

    @Test func aFullWindowWaitingForDemandGoesBeforeNewerItems() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .max(1))
        pub.collect(.byTimeOrCount(clock, .seconds(1), 2)).subscribe(sub)
        pub.send(1)
        clock.advance(by: .seconds(1))  // [1] uses the demand
        pub.send(2)
        pub.send(3)  // beyond the grant of 2: still collected, and kept
        clock.advance(by: .zero)
        pub.send(4)
        clock.advance(by: .seconds(1))
        #expect(sub.values == [[1]])
        sub.request(.max(2))
        clock.advance(by: .seconds(1))
        #expect(sub.values == [[1], [2, 3], [4]])
        #expect(pub.subscription.history == [.requested(.max(2)), .requested(.max(4))])
        #expect(sub.demandViolations == 0)
    }

    // MARK: 6. Cancel, failure, a second subscription

    @Test func cancelCancelsTheUpstreamAndTheTimerAndNothingMoreGoesDownstream() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited)
        pub.collect(.byTimeOrCount(clock, .seconds(1), 2)).subscribe(sub)
        #expect(clock.pendingCount == 1)  // the timer
        pub.send(1)
        pub.send(2)  // closed; its delivery is scheduled
        pub.send(3)
        sub.cancel()
        #expect(pub.subscription.history == [.requested(.unlimited), .cancelled])
        pub.send(4)
        pub.send(completion: .finished)
        clock.advance(by: .seconds(5))
        #expect(sub.events == [.subscription])
        #expect(clock.pendingCount == 0)
    }

    @Test func aFailureCancelsTheTimerAndDropsFullWindowsWaitingForDemand() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .max(1))
        pub.collect(.byTimeOrCount(clock, .seconds(1), 2)).subscribe(sub)
        pub.send(1)
        pub.send(2)
        clock.advance(by: .zero)
        pub.send(3)
        pub.send(4)  // no demand left: waits
        clock.advance(by: .zero)
        #expect(sub.values == [[1, 2]])
        pub.send(completion: .failure(OperatorTestError(6)))
        #expect(clock.pendingCount == 1)  // the completion's turn; the timer is gone
        clock.advance(by: .seconds(3))
        #expect(sub.events == [.subscription, .value([1, 2]), .completion(.failure(OperatorTestError(6)))])
        #expect(clock.pendingCount == 0)
        sub.request(.max(1))
        clock.advance(by: .seconds(1))
        #expect(sub.events.count == 3)
    }

    @Test func aSecondSubscriptionIsCancelled() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited)
        pub.collect(.byTime(clock, .seconds(1))).subscribe(sub)
        let second = TestSubscription()
        pub.resubscribe(with: second)
        #expect(second.history == [.cancelled])
        #expect(pub.subscription.history == [.requested(.max(1))])
        #expect(clock.pendingCount == 1)  // still one timer
        pub.send(1)
        clock.advance(by: .seconds(1))
        #expect(sub.values == [[1]])
        #expect(sub.subscriptionCount == 1)
    }

    @Test func aCancelFromInsideReceiveStopsDeliveryThere() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .unlimited) { sub, _ in
            sub.cancel()
            return .none
        }
        pub.collect(.byTimeOrCount(clock, .seconds(1), 1)).subscribe(sub)
        pub.send(1)
        pub.send(2)
        pub.send(3)
        clock.advance(by: .seconds(2))
        #expect(sub.values == [[1]])
        #expect(pub.subscription.history == [.requested(.unlimited), .cancelled])
        #expect(clock.pendingCount == 0)
    }

    @Test func aRequestFromInsideReceiveIsServedAfterThatCallReturns() {
        let pub = Pub(), clock = Clock()
        let sub = Sub(initialDemand: .max(1)) { sub, _ in
            sub.request(.max(1))
            return .none
        }
        pub.collect(.byTimeOrCount(clock, .seconds(1), 1)).subscribe(sub)
        for value in 1...3 { pub.send(value) }  // beyond the grant after the first: kept
        clock.advance(by: .zero)
        #expect(sub.values == [[1], [2], [3]])
        #expect(sub.overlaps == 0 && sub.demandViolations == 0)
    }

    @Test func aCancelFromInsideReceiveSubscriptionCancelsTheTimer() {
        let pub = Pub(), clock = Clock()
        let sub = CancelOnSubscription()
        pub.collect(.byTime(clock, .seconds(1))).subscribe(sub)
        #expect(pub.subscription.history == [.cancelled])
        #expect(clock.pendingCount == 0)
    }
}

/// An upstream that delivers only what the collect asked for — its requests and the demand it
/// returned — like the `TracingSubject` of CombineX's spec; what it may not send, it does not.
private final class DemandRespectingSender {
    let pub: Pub
    private(set) var returned: [Subscribers.Demand] = []
    private var sent = 0

    init(_ pub: Pub) { self.pub = pub }

    func send(_ value: Int) {
        var granted = Subscribers.Demand.none
        for case .requested(let demand) in pub.subscription.history { granted += demand }
        for demand in returned { granted += demand }
        guard granted > sent else { return }
        sent += 1
        returned.append(pub.send(value))
    }
}

/// Cancels its subscription as soon as it gets it.
private final class CancelOnSubscription: Subscriber, @unchecked Sendable {
    typealias Input = [Int]
    typealias Failure = OperatorTestError
    let combineIdentifier = CombineIdentifier()
    func receive(subscription: Subscription) { subscription.cancel() }
    func receive(_ input: [Int]) -> Subscribers.Demand { .none }
    func receive(completion: Subscribers.Completion<OperatorTestError>) {}
}
