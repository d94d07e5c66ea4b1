import EventBusKit
import Synchronization
import Testing
import TestSupport

/// A source that keeps the greetings of subscribers who join it, for the test to answer.
final class GreetingProbe: GreetsJoiningSubscribers, @unchecked Sendable {
    let id: String
    let waiting = Mutex<[SubscriberGreeting]>([])
    init(id: String) { self.id = id }
    func start(posting bus: Bus) {}
    func stop() {}
    func subscriberJoined(_ greeting: SubscriberGreeting) { waiting.withLock { $0.append(greeting) } }
}

/// ``GreetsJoiningSubscribers``: what a source posts through a greeting reaches the joiner alone,
/// numbered and in order with the source's other posts, and only what its patterns take.
@Suite struct SubscriberGreetingTests {
    @Test func aGreetingReachesTheJoinerAloneInSequenceOrder() throws {
        let bus = Bus()
        let probe = GreetingProbe(id: "probe:greet")
        let request = SourceRequest(id: probe.id) { probe }
        let first = Collected<[Event]>([])
        let second = Collected<[Event]>([])
        let a = bus.publisher(for: [try EventPattern("probe.>")], from: request).sink { event in first.update { $0.append(event) } }
        #expect(probe.waiting.withLock { $0.isEmpty }, "the first subscriber starts the source; it is not greeted")
        let b = bus.publisher(for: [try EventPattern("probe.*")], from: request).sink { event in second.update { $0.append(event) } }
        let greeting = try #require(probe.waiting.withLock { $0.first })

        bus.post(Event(name: "probe.before", source: probe.id))
        let numbers = greeting.post(contentsOf: [Event(name: "probe.hello", source: probe.id),
                                                 Event(name: "probe.not.for.b", source: probe.id)])
        bus.post(Event(name: "probe.after", source: probe.id))

        #expect(numbers.count == 1, "only what the joiner's patterns take is posted")
        #expect(first.value.map(\.name) == ["probe.before", "probe.after"])
        #expect(second.value.map(\.name) == ["probe.before", "probe.hello", "probe.after"])
        let sequences = second.value.map(\.sequence)
        #expect(sequences == sequences.sorted() && sequences[1] == numbers.lowerBound)
        a.cancel()
        b.cancel()
    }
}
