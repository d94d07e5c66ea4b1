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
/// numbered and in order with the source's other posts, and only what its patterns take; what
/// the source posts to everyone reaches the joiner only once its greeting is complete.
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
        #expect(second.value.map(\.name) == ["probe.hello", "probe.after"], "nothing posted to everyone before its greeting")
        let sequences = second.value.map(\.sequence)
        #expect(sequences == sequences.sorted() && sequences[0] == numbers.lowerBound)
        a.cancel()
        b.cancel()
    }

    /// A greeting in parts (a notice now, the snapshot later) keeps the joiner from what is
    /// posted to everyone until its last part; one whose events the joiner's patterns take none
    /// of still ends.
    @Test func onlyTheCompletingPartOfAGreetingLetsTheSourcesOtherEventsThrough() throws {
        let bus = Bus()
        let probe = GreetingProbe(id: "probe:parts")
        let request = SourceRequest(id: probe.id) { probe }
        let joined = Collected<[Event]>([])
        let narrow = Collected<[Event]>([])
        let first = bus.publisher(for: [try EventPattern("probe.>")], from: request).sink { _ in }
        let joiner = bus.publisher(for: [try EventPattern("probe.>")], from: request).sink { event in joined.update { $0.append(event) } }
        let picky = bus.publisher(for: [try EventPattern("probe.change")], from: request).sink { event in narrow.update { $0.append(event) } }
        let greetings = probe.waiting.withLock { $0 }
        #expect(greetings.count == 2)

        greetings[0].post(contentsOf: [Event(name: "probe.blind", source: probe.id)], completing: false)
        greetings[1].post(contentsOf: [Event(name: "probe.snapshot", source: probe.id)])  // picky takes none of it
        bus.post(Event(name: "probe.change", source: probe.id, fields: ["n": 1]))
        greetings[0].post(contentsOf: [Event(name: "probe.snapshot", source: probe.id)])
        bus.post(Event(name: "probe.change", source: probe.id, fields: ["n": 2]))

        #expect(joined.value.map(\.name) == ["probe.blind", "probe.snapshot", "probe.change"])
        #expect(joined.value.last?.fields["n"] == .int(2))
        #expect(narrow.value.map { $0.fields["n"] } == [.int(1), .int(2)])
        for subscription in [first, joiner, picky] { subscription.cancel() }
    }
}
