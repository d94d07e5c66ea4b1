import EventBusKit
import Foundation
import Testing
import TestSupport

private typealias Pub = TestPublisher<Int, OperatorTestError>
private typealias Pair = TestSubscriber<(Int, Int), OperatorTestError>

private func pairs<F>(_ sub: TestSubscriber<(Int, Int), F>) -> [[Int]] {
    sub.values.map { [$0.0, $0.1] }
}

/// The corners where a straightforward combineLatest differs from Apple's Combine, pinned to
/// Combine's behaviour (Combine's CombineLatest keeps a "recursion" flag around the downstream
/// call and emits only when a value arrives with demand).
@Suite("CombineLatest conformance with Combine")
struct CombineLatestConformanceTests {
    // MARK: 1. A value sent back from the subscriber

    @Test func feedbackSubscriberGetsOneValuePerOutsideValueAndNeverLoops() {
        let a = PassthroughSubject<Int, OperatorTestError>(), b = PassthroughSubject<Int, OperatorTestError>()
        // Writes back into its own source on every output: with re-entrant delivery this loops
        // forever (and queues without bound); Combine emits once.
        let sub = Pair(initialDemand: .unlimited) { _, value in
            a.send(value.0 + 1)
            return .none
        }
        a.combineLatest(b).subscribe(sub)
        a.send(1)
        b.send(10)
        #expect(pairs(sub) == [[1, 10]])
        // The value sent back was recorded as a's latest: the next outside value shows it.
        b.send(20)
        #expect(pairs(sub) == [[1, 10], [2, 20]])
        b.send(30)
        #expect(pairs(sub) == [[1, 10], [2, 20], [3, 30]])
        #expect(sub.overlaps == 0)
    }

    @Test func reentrantValueIsRecordedNotEmittedWhateverTheDemand() {
        let a = Pub(), b = Pub()
        let returned = SharedBox<[Subscribers.Demand]>([])
        let sub = Pair(initialDemand: .max(10)) { _, value in
            if value == (1, 10) {
                returned.value.append(a.send(2))
                returned.value.append(b.send(11))
            }
            return .none
        }
        a.combineLatest(b).subscribe(sub)
        a.send(1)
        b.send(10)
        #expect(pairs(sub) == [[1, 10]])  // demand 9 left, still nothing emitted for 2 and 11
        #expect(returned.value == [.none, .none])
        a.send(3)  // the next value from outside combines with both recorded values
        #expect(pairs(sub) == [[1, 10], [3, 11]])
        #expect(sub.demandViolations == 0)
    }

    @Test func valuesProducedByARequestFromInsideReceiveAreRecordedNotEmitted() {
        // A request from inside `receive` that makes an upstream send synchronously is just as
        // re-entrant: Combine records that value too.
        let a = PassthroughSubject<Int, Never>()
        let numbers = [100, 200].publisher
        let sub = TestSubscriber<(Int, Int), Never>(initialDemand: .max(1)) { sub, _ in
            sub.request(.max(1))
            return .none
        }
        a.combineLatest(numbers).subscribe(sub)
        // numbers sent 100 on the first request; 200 waits for more demand.
        a.send(1)  // (1, 100); the request from inside makes numbers send 200: recorded
        #expect(sub.values.map { [$0.0, $0.1] } == [[1, 100]])
        a.send(2)
        #expect(sub.values.map { [$0.0, $0.1] } == [[1, 100], [2, 200]])
    }

    @Test func valueFromAnotherThreadDuringADeliveryIsDeliveredAfterIt() {
        // Not re-entrant: another thread's value is not lost (its combination waits for the call
        // in flight), and the calls never overlap.
        let a = PassthroughSubject<Int, Never>(), b = PassthroughSubject<Int, Never>()
        let inside = DispatchSemaphore(value: 0), sent = DispatchSemaphore(value: 0)
        let sub = TestSubscriber<(Int, Int), Never>(initialDemand: .unlimited) { _, value in
            if value == (1, 10) {
                inside.signal()
                sent.wait()
            }
            return .none
        }
        a.combineLatest(b).subscribe(sub)
        a.send(1)
        nonisolated(unsafe) let sender = a
        let other = Thread {
            inside.wait()
            sender.send(2)  // while the first delivery is still running on the main test thread
            sent.signal()
        }
        other.start()
        b.send(10)
        #expect(sub.values.map { [$0.0, $0.1] } == [[1, 10], [2, 10]])
        #expect(sub.overlaps == 0)
    }

    // MARK: 2. No demand, no combination

    @Test func combinationsFormedWithoutDemandAreDiscarded() {
        let a = Pub(), b = Pub()
        let sub = Pair(initialDemand: .max(1))
        a.combineLatest(b).subscribe(sub)
        a.send(1)
        b.send(10)
        a.send(2)  // no demand: recorded, combination discarded
        a.send(3)
        #expect(pairs(sub) == [[1, 10]])

        sub.request(.max(2))  // nothing kept to send now
        #expect(pairs(sub) == [[1, 10]])
        b.send(20)  // the next value emits, with the latest of each
        #expect(pairs(sub) == [[1, 10], [3, 20]])
        b.send(30)
        b.send(40)  // demand used up again
        #expect(pairs(sub) == [[1, 10], [3, 20], [3, 30]])
        #expect(sub.demandViolations == 0)
    }

    @Test func aDiscardedCombinationDoesNotDelayTheCompletion() {
        let a = Pub(), b = Pub()
        let sub = Pair(initialDemand: .max(1))
        a.combineLatest(b).subscribe(sub)
        a.send(1)
        b.send(1)
        a.send(2)  // discarded
        a.send(completion: .finished)
        b.send(completion: .finished)
        #expect(pairs(sub) == [[1, 1]])
        #expect(sub.completions == [.finished])  // at once, without waiting for demand
        sub.request(.max(1))
        #expect(pairs(sub) == [[1, 1]])
    }

    @Test func noOutputBeforeDemandEvenOnceEveryUpstreamHasAValue() {
        let a = Pub(), b = Pub()
        let sub = Pair()
        a.combineLatest(b).subscribe(sub)
        a.send(1)
        b.send(1)
        sub.request(.max(1))
        #expect(sub.values.isEmpty)
        a.send(2)
        #expect(pairs(sub) == [[2, 1]])
    }

    // MARK: 5. Requesting .none traps

    @Test func requestingNoneTrapsInAChildProcess() throws {
        // Combine's precondition, so a trap: run in a child process, never in the test runner.
        let fixture = try #require(BuiltExecutable.path(named: "operator-trap-fixture"),
                                   "build with swift build --build-tests first")
        let trapped = try runFixture(fixture, "combineLatest-request-none")
        #expect(trapped.output.contains("subscribed"))
        #expect(!trapped.output.contains("returned"))
        #expect(trapped.output.contains("request(.none)"))
        #expect(trapped.reason == .uncaughtSignal)
        #expect([SIGILL, SIGTRAP].contains(trapped.status))

        // The control: the same program with a legal request runs to its end.
        let control = try runFixture(fixture, "combineLatest-request-one")
        #expect(control.reason == .exit && control.status == 0)
        #expect(control.output.contains("value 1 2"))
        #expect(control.output.contains("returned"))
    }
}
