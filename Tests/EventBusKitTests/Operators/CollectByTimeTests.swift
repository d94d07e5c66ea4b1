import Dispatch
import EventBusKit
import Foundation
import Testing

/// `collect(_:options:)` on real dispatch queues and on the bus. Real time only decides how the
/// items fall into arrays; every assertion is on content and order, so a slow machine changes
/// nothing but the number of arrays.
@Suite("CollectByTime on queues and the bus")
struct CollectByTimeTests {
    static let onQueue = DispatchSpecificKey<String>()

    @Test func moduleCodeWrittenForCombineCompiles() {
        let queue = DispatchQueue(label: "collect.api")
        let subject = PassthroughSubject<Int, Never>()
        let byTime: Publishers.CollectByTime<PassthroughSubject<Int, Never>, DispatchQueue> =
            subject.collect(.byTime(queue, .seconds(1)))
        let byTimeOrCount = subject.collect(.byTimeOrCount(queue.ocombine, .milliseconds(10), 5))
        let withOptions = subject.collect(.byTime(queue, .seconds(1)), options: .init(qos: .utility))
        #expect(byTime.options == nil && withOptions.options?.qos == .utility)
        if case .byTimeOrCount(_, let stride, let count) = byTimeOrCount.strategy {
            #expect(stride == .milliseconds(10) && count == 5)
        } else {
            Issue.record("wrong strategy")
        }
        let publisher = Publishers.CollectByTime(upstream: Just(1), strategy: .byTime(queue, .seconds(1)), options: nil)
        #expect(publisher.upstream == Just(1))
    }

    /// Ticks on a queue while another thread sends: every value exactly once, in order, and no
    /// array is empty. The sender waits for a tick to have delivered something every 1 000 values,
    /// so values do fall into several windows, however slow the machine.
    @Test func byTimeOnARealQueueDeliversEveryValueOnceInOrder() async {
        let queue = DispatchQueue(label: "collect.byTime")
        queue.setSpecific(key: Self.onQueue, value: "q")
        let pub = TestPublisher<Int, Never>()
        let elsewhere = SharedBox(0)
        let sub = TestSubscriber<[Int], Never>(initialDemand: .unlimited) { _, _ in
            if DispatchQueue.getSpecific(key: Self.onQueue) != "q" { elsewhere.value += 1 }
            return .none
        }
        pub.collect(.byTime(queue, .milliseconds(1))).subscribe(sub)
        let total = 20_000
        runConcurrently(threads: 1) { _ in
            for value in 0..<total {
                pub.send(value)
                if value % 1_000 == 999 {  // (a minute at most: a broken tick fails, not hangs)
                    let delivered = sub.values.count, deadline = Date() + 60
                    while sub.values.count == delivered, Date() < deadline { usleep(100) }
                }
            }
            pub.send(completion: .finished)
        }
        #expect(await eventually { sub.completions.count == 1 })
        #expect(sub.values.joined().elementsEqual(0..<total))
        #expect(!sub.values.contains { $0.isEmpty })
        #expect(sub.values.count >= total / 1_000)
        #expect(sub.completions == [.finished])
        #expect(sub.overlaps == 0 && sub.demandViolations == 0 && elsewhere.value == 0)
    }

    /// Bounded demand requested from a third thread while one thread sends (ignoring demand, so
    /// full windows wait) and the queue ticks: nothing lost, nothing beyond demand, arrays of at
    /// most `count`.
    @Test func byTimeOrCountOnARealQueueWithDemandFromAnotherThread() async {
        let queue = DispatchQueue(label: "collect.byTimeOrCount")
        let pub = TestPublisher<Int, Never>()
        let sub = TestSubscriber<[Int], Never>(initialDemand: .max(5))
        pub.collect(.byTimeOrCount(queue, .milliseconds(1), 7)).subscribe(sub)
        let total = 10_000
        let sent = SharedBox(false)
        runConcurrently(threads: 2) { thread in
            if thread == 0 {
                for value in 0..<total { pub.send(value) }
                pub.send(completion: .finished)
                sent.value = true
            } else {
                while sub.completions.isEmpty {
                    sub.request(.max(3))
                    usleep(sent.value ? 10 : 200)
                }
            }
        }
        #expect(await eventually { sub.completions.count == 1 })
        #expect(sub.values.joined().elementsEqual(0..<total))
        #expect(!sub.values.contains { $0.isEmpty || $0.count > 7 })
        #expect(sub.overlaps == 0 && sub.demandViolations == 0)
    }

    /// A scheduler that runs its actions at the same time (here each on a thread of its own): the
    /// tick, the completion and the actions for full windows meet, and the downstream still gets
    /// one call at a time, and the arrays in order.
    @Test func onAConcurrentSchedulerDeliveryIsStillOneCallAtATimeInOrder() async {
        let pub = TestPublisher<Int, Never>()
        let sub = TestSubscriber<[Int], Never>(initialDemand: .unlimited) { _, _ in
            usleep(20)  // widen the window for another action to come in
            return .none
        }
        pub.collect(.byTimeOrCount(ThreadPerActionScheduler(), .microseconds(100), 3)).subscribe(sub)
        let total = 6_000
        runConcurrently(threads: 1) { _ in
            for value in 0..<total { pub.send(value) }
            pub.send(completion: .finished)
        }
        #expect(await eventually { sub.completions.count == 1 })
        #expect(sub.values.joined().elementsEqual(0..<total))
        #expect(!sub.values.contains { $0.isEmpty || $0.count > 3 })
        #expect(sub.overlaps == 0)
    }

    /// On the bus, as a module writes it: a mailbox-scoped publisher collected on the mailbox's
    /// queue. Every event once, in posting order, in arrays delivered on that queue.
    @Test func busEventsAreCollectedInWindowsOnTheMailboxQueue() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "collect")
        mailbox.queue.setSpecific(key: Self.onQueue, value: "m")
        let elsewhere = SharedBox(0)
        let sub = TestSubscriber<[Event], Never>(initialDemand: .unlimited) { _, _ in
            if DispatchQueue.getSpecific(key: Self.onQueue) != "m" { elsewhere.value += 1 }
            return .none
        }
        try bus.scoped(to: mailbox).publisher(for: "e.*")
            .collect(.byTime(mailbox.queue, .milliseconds(50)))
            .subscribe(sub)
        var posted: [UInt64] = []
        let rounds = 5, perRound = 1_000
        for round in 0..<rounds {
            for i in 0..<perRound { posted.append(bus.post("e.\(round)", fields: ["i": .int(Int64(i))])) }
            // The next round is posted once this one arrived: at least one array per round.
            let expected = posted.count
            #expect(await eventually { sub.values.joined().count == expected })
        }
        #expect(sub.values.joined().map(\.sequence) == posted)
        #expect(!sub.values.contains { $0.isEmpty })
        #expect(sub.values.count >= rounds)
        #expect(sub.overlaps == 0 && sub.demandViolations == 0 && elsewhere.value == 0)
        sub.cancel()
    }
}
