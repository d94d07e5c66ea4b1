import EventBusKit
import Foundation
import Testing

/// `for await … in publisher.values` behind every kind of operator: leaving the loop — `break`,
/// or cancelling the task while it waits — cancels the subscription, so the bus's subscription
/// count goes back to what it was. (`values` is resolved where each chain is spelled out, as in
/// module code: the SDK's `values` is chosen by the publisher's type.)
@Suite struct AsyncValuesTests {
    enum Chain: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case bare, filter, map, compactMap, removeDuplicates, fastPathChain
        case erased, combineFilter, combineRemoveDuplicates, scan, debounce, receiveOn, subscribeOn, share
        case merge, combineLatest, collectByTime

        var testDescription: String { rawValue }

        /// How many bus subscriptions the chain makes.
        var subscriptions: Int { [.merge, .combineLatest].contains(self) ? 2 : 1 }

        /// Runs `loop` over the chain's `values`, built on `bus`.
        func run(on bus: Bus, _ loop: Loop) async throws -> Int {
            let events = try bus.publisher(for: "n.*")
            let queue = DispatchQueue(label: "async-values-test")
            func n(_ event: Event) -> Int64 { event["n"]?.intValue ?? 0 }
            switch self {
            case .bare: return try await loop(events.values)
            case .filter: return try await loop(events.filter { _ in true }.values)
            case .map: return try await loop(events.map(n).values)
            case .compactMap: return try await loop(events.compactMap { $0["n"]?.intValue }.values)
            case .removeDuplicates: return try await loop(events.map(n).removeDuplicates().values)
            case .fastPathChain:
                return try await loop(events.filter { _ in true }.map(n).removeDuplicates().compactMap { $0 }.values)
            case .erased: return try await loop(events.eraseToAnyPublisher().values)
            case .combineFilter: return try await loop(events.eraseToAnyPublisher().filter { _ in true }.values)
            case .combineRemoveDuplicates:
                return try await loop(events.eraseToAnyPublisher().map(n).removeDuplicates().values)
            case .scan: return try await loop(events.map(n).scan(0, +).values)
            case .debounce:
                return try await loop(events.map(n).debounce(for: .milliseconds(2), scheduler: queue.ocombine).values)
            case .receiveOn: return try await loop(events.receive(on: queue.ocombine).values)
            case .subscribeOn: return try await loop(events.subscribe(on: queue.ocombine).values)
            case .share: return try await loop(events.map(n).share().values)
            case .merge: return try await loop(events.merge(with: try bus.publisher(for: "n.*")).values)
            case .combineLatest: return try await loop(events.combineLatest(try bus.publisher(for: "n.*")).map { n($0.0) }.values)
            case .collectByTime:
                return try await loop(events.collect(.byTime(queue.ocombine, .milliseconds(5))).values)
            }
        }
    }

    /// How a test leaves the loop; returns how many values it took.
    struct Loop {
        let breakAfter: Int?  // nil: until the sequence ends

        func callAsFunction<S: AsyncSequence>(_ values: S) async throws -> Int {
            var taken = 0
            for try await _ in values {
                taken += 1
                if taken == breakAfter { break }
            }
            return taken
        }
    }

    /// Posts `n.1`, `n.2`, … every few milliseconds until cancelled (a debounce emits once
    /// the posts pause), bounded by the tests' patience.
    private func feed(_ bus: Bus) -> Task<Void, Never> {
        Task {
            let deadline = ContinuousClock.now + patience
            var n: Int64 = 0
            while !Task.isCancelled, ContinuousClock.now < deadline {
                n += 1
                bus.post("n.\(n)", fields: ["n": .int(n)])
                try? await Task.sleep(for: .milliseconds(10))
            }
        }
    }

    @Test(arguments: Chain.allCases)
    func breakReleasesTheSubscription(_ chain: Chain) async throws {
        let bus = Bus()
        let standing = try bus.publisher(for: "other").sink { _ in }  // so "as before" is not 0
        let before = bus.statistics.subscriptions
        let reader = Task { try await chain.run(on: bus, Loop(breakAfter: 2)) }
        #expect(await eventually { bus.statistics.subscriptions == before + chain.subscriptions })
        let feeder = feed(bus)
        defer { feeder.cancel() }
        #expect(try await reader.value == 2)
        #expect(await eventually { bus.statistics.subscriptions == before },
                "\(bus.statistics.subscriptions - before) subscription(s) left after break")
        standing.cancel()
    }

    @Test(arguments: Chain.allCases)
    func cancellingTheWaitingTaskReleasesTheSubscription(_ chain: Chain) async throws {
        let bus = Bus()
        let before = bus.statistics.subscriptions
        let reader = Task { try await chain.run(on: bus, Loop(breakAfter: nil)) }
        #expect(await eventually { bus.statistics.subscriptions == before + chain.subscriptions })
        try await Task.sleep(for: .milliseconds(20))  // most likely waiting in `next()` by now
        reader.cancel()
        #expect(try await reader.value == 0)  // the loop ends: nothing was posted
        #expect(await eventually { bus.statistics.subscriptions == before },
                "\(bus.statistics.subscriptions - before) subscription(s) left after cancel")
    }

    @Test func theLoopEndsWhenTheBusFinishes() async throws {
        let bus = Bus()
        let reader = Task { try await Chain.fastPathChain.run(on: bus, Loop(breakAfter: nil)) }
        #expect(await eventually { bus.statistics.subscriptions == 1 })
        bus.post("n.1", fields: ["n": .int(1)])
        bus.finish()
        #expect(try await reader.value == 1)
    }
}
