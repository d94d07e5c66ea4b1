import EventBusKit
import Foundation
import Testing
import TestSupport

/// `filter`, `map`, `compactMap` and `removeDuplicates` directly on a bus publisher: the fast path
/// must behave as the same chain of Combine's (OpenCombine's) operators on the bus publisher.
@Suite struct EventPipelineTests {
    private func post(_ bus: Bus, _ numbers: ClosedRange<Int>) {
        for n in numbers { bus.post("n.\(n)", fields: ["n": .int(Int64(n))]) }
    }

    @Test func operatorsOnABusPublisherBuildAPipeline() throws {
        let bus = Bus()
        let source = try bus.publisher(for: "n.*")
        let filtered: EventPipeline<Event> = source.filter { _ in true }
        let mapped: EventPipeline<String> = source.map(\.name)
        let compact: EventPipeline<Int64> = source.compactMap { $0["n"]?.intValue }
        let deduplicated: EventPipeline<Event> = source.removeDuplicates { $0.name == $1.name }
        let chained: EventPipeline<Int64> = filtered.map(\.name).removeDuplicates()
            .compactMap { Int64($0.dropFirst(2)) }.filter { $0 > 0 }
        // Any other operator takes a pipeline as an ordinary publisher.
        let erased: AnyPublisher<Int64, Never> = chained.eraseToAnyPublisher()
        _ = (mapped, compact, deduplicated, erased)
    }

    @Test func sinkRunsTheStagesInOrder() throws {
        let bus = Bus()
        let got = Collected<[Int64]>([])
        let cancellable = try bus.publisher(for: "n.*")
            .filter { $0.name != "n.3" }
            .compactMap { $0["n"]?.intValue }
            .map { $0 * 10 }
            .filter { $0 != 50 }
            .sink { value in got.update { $0.append(value) } }
        post(bus, 1...6)
        #expect(got.value == [10, 20, 40, 60])
        cancellable.cancel()
        post(bus, 7...7)
        #expect(got.value == [10, 20, 40, 60])
        #expect(bus.statistics.subscriptions == 0)
    }

    @Test func demandCountsOutputsAndStagesSeeEachEventOnceWhenItCanGoOut() throws {
        let bus = Bus()
        let seen = Collected<[Int64]>([])
        let sub = TestSubscriber<Int64, Never>(initialDemand: .max(2))
        try bus.publisher(for: "n.*")
            .compactMap { event -> Int64? in
                let n = event["n"]!.intValue!
                seen.update { $0.append(n) }
                return n.isMultiple(of: 2) ? n : nil
            }
            .subscribe(sub)
        post(bus, 1...10)
        #expect(sub.values == [2, 4])  // dropped events spent no demand
        #expect(seen.value == [1, 2, 3, 4])  // 5… wait in the bus subscription, unseen
        sub.request(.max(1))
        #expect(sub.values == [2, 4, 6])
        #expect(seen.value == [1, 2, 3, 4, 5, 6])
        sub.request(.unlimited)
        #expect(sub.values == [2, 4, 6, 8, 10])
        #expect(sub.demandViolations == 0)
        #expect(sub.overlaps == 0)
    }

    @Test func sameOutputsAsOpenCombinesOperatorsUnderLimitedDemand() throws {
        let bus = Bus()
        func chain<P: Publisher>(_ upstream: P) -> AnyPublisher<String, Never>
        where P.Output == Event, P.Failure == Never {
            upstream.filter { $0["n"]!.intValue! % 3 != 0 }
                .map { "\($0["n"]!.intValue! / 4)" }
                .removeDuplicates()
                .eraseToAnyPublisher()
        }
        // The fast path (operators on the bus publisher itself) and OpenCombine's generic ones
        // (the same operators applied after type erasure), each with demand 2 plus 1 per value.
        let fast = TestSubscriber<String, Never>(initialDemand: .max(2)) { _, _ in .max(1) }
        let pipeline = try bus.publisher(for: "n.*")
            .filter { $0["n"]!.intValue! % 3 != 0 }
            .map { "\($0["n"]!.intValue! / 4)" }
            .removeDuplicates()
        pipeline.subscribe(fast)
        let generic = TestSubscriber<String, Never>(initialDemand: .max(2)) { _, _ in .max(1) }
        chain(try bus.publisher(for: "n.*").eraseToAnyPublisher()).subscribe(generic)
        post(bus, 1...40)
        #expect(fast.values == generic.values)
        #expect(fast.values == (0...10).map(String.init))
        #expect(fast.demandViolations == 0 && generic.demandViolations == 0)
    }

    @Test func removeDuplicatesKeepsItsPreviousValuePerSubscription() throws {
        let bus = Bus()
        let pipeline = try bus.publisher(for: "n.*").map { $0["n"]!.intValue! / 2 }.removeDuplicates()
        let first = TestSubscriber<Int64, Never>(initialDemand: .unlimited)
        pipeline.subscribe(first)
        post(bus, 1...4)  // 0 1 1 2
        let second = TestSubscriber<Int64, Never>(initialDemand: .unlimited)
        pipeline.subscribe(second)
        post(bus, 5...6)  // 2 3
        #expect(first.values == [0, 1, 2, 3])
        #expect(second.values == [2, 3])  // its first value always passes
    }

    /// A predicate that is not transitive tells the two rules apart: posts 4, 3, 2 with "within
    /// one" give [4] when each value is compared with the one received before it (Combine's
    /// rule: 3 is near 4, 2 is near 3) and [4, 2] when compared with the last that passed.
    @Test func removeDuplicatesComparesWithThePreviousValueReceivedAsCombineDoes() throws {
        let bus = Bus()
        let near: (Int64, Int64) -> Bool = { abs($0 - $1) <= 1 }
        let fast = TestSubscriber<Int64, Never>(initialDemand: .unlimited)
        try bus.publisher(for: "n.*").map { $0["n"]!.intValue! }.removeDuplicates(by: near).subscribe(fast)
        let generic = TestSubscriber<Int64, Never>(initialDemand: .unlimited)
        try bus.publisher(for: "n.*").eraseToAnyPublisher().map { $0["n"]!.intValue! }.removeDuplicates(by: near).subscribe(generic)
        for n in [4, 3, 2, 9, 7, 6] { bus.post("n.x", fields: ["n": .int(Int64(n))]) }
        #expect(generic.values == [4, 9, 7])
        #expect(fast.values == generic.values)
    }

    @Test func cancelStopsTheStagesAndFinishCompletesAfterTheBuffer() throws {
        let bus = Bus()
        let calls = Collected(0)
        let sub = TestSubscriber<Event, Never>(initialDemand: .max(1))
        try bus.publisher(for: "n.*").filter { _ in calls.update { $0 += 1 }; return true }.subscribe(sub)
        post(bus, 1...3)
        bus.finish()
        #expect(sub.values.count == 1)
        #expect(sub.completions.isEmpty)  // two events still wait for demand
        sub.request(.max(5))
        #expect(sub.values.map(\.name) == ["n.1", "n.2", "n.3"])
        #expect(sub.completions == [.finished])

        let other = Bus()
        let cancelled = TestSubscriber<Event, Never>(initialDemand: .unlimited)
        let before = calls.value
        try other.publisher(for: "n.*").filter { _ in calls.update { $0 += 1 }; return true }.subscribe(cancelled)
        post(other, 1...1)
        cancelled.cancel()
        post(other, 2...3)
        #expect(cancelled.values.count == 1)
        #expect(calls.value == before + 1)
    }

    @Test func onAMailboxScopedBusTheStagesRunOnTheMailboxQueue() async throws {
        let mailbox = Mailbox(label: "pipeline-test")
        let key = DispatchSpecificKey<String>()
        mailbox.queue.setSpecific(key: key, value: "mailbox")
        let bus = Bus().scoped(to: mailbox)
        let queues = Collected<[String?]>([])
        let got = Collected<[String]>([])
        let cancellable = try bus.publisher(for: "n.*")
            .filter { _ in queues.update { $0.append(DispatchQueue.getSpecific(key: key)) }; return true }
            .map(\.name)
            .sink { name in got.update { $0.append(name) } }
        post(bus, 1...3)
        #expect(await eventually { got.value.count == 3 })
        #expect(queues.value == ["mailbox", "mailbox", "mailbox"])
        cancellable.cancel()
    }
}
