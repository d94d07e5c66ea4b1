import EventBusKit
import Synchronization
import Testing
import TestSupport

/// A source that counts its starts and stops and posts one `probe.started` event when started.
final class ProbeSource: EventSource {
    static let starts = Atomic<Int>(0)
    static let stops = Atomic<Int>(0)
    let id: String
    init(id: String) { self.id = id }
    func start(posting bus: Bus) {
        Self.starts.add(1, ordering: .relaxed)
        bus.post(Event(name: "probe.started", source: id))
    }
    func stop() { Self.stops.add(1, ordering: .relaxed) }
}

/// A source that posts a burst larger than a subscription's buffer as soon as it starts, from the
/// starting thread — as a journal reader does with a backlog, only without its timing luck.
final class BurstSource: EventSource {
    static let size = 5_000
    static let starts = Atomic<Int>(0)
    static let stops = Atomic<Int>(0)
    let id: String
    init(id: String) { self.id = id }
    func start(posting bus: Bus) {
        Self.starts.add(1, ordering: .relaxed)
        for index in 0..<Self.size { bus.post(Event(name: "burst.item", source: id, fields: ["index": .int(Int64(index))])) }
    }
    func stop() { Self.stops.add(1, ordering: .relaxed) }
}

@Suite(.serialized) struct SharedSourceTests {
    let request = SourceRequest(id: "probe:a") { ProbeSource(id: "probe:a") }

    @Test func firstSubscriberStartsLastCancelStopsAndTheNextStartsAnew() throws {
        let bus = Bus()
        let (starts0, stops0) = (ProbeSource.starts.load(ordering: .relaxed), ProbeSource.stops.load(ordering: .relaxed))
        let first = RecordingSubscriber()
        let second = RecordingSubscriber()
        bus.publisher(for: [.all], from: request).subscribe(first)
        bus.publisher(for: [.all], from: request).subscribe(second)
        #expect(ProbeSource.starts.load(ordering: .relaxed) - starts0 == 1)
        #expect(first.names == ["probe.started"])  // registered before the source started
        #expect(second.names.isEmpty)  // hot: no replay for late subscribers
        #expect(bus.statistics.sources == ["probe:a": 2])

        first.cancel()
        #expect(ProbeSource.stops.load(ordering: .relaxed) - stops0 == 0)
        second.cancel()
        #expect(ProbeSource.stops.load(ordering: .relaxed) - stops0 == 1)
        #expect(bus.statistics.sources.isEmpty)

        let third = RecordingSubscriber()
        bus.publisher(for: [.all], from: request).subscribe(third)
        #expect(ProbeSource.starts.load(ordering: .relaxed) - starts0 == 2)
        #expect(third.names == ["probe.started"])
        third.cancel()
    }

    /// The first subscriber's demand is in place before its source starts: a burst far beyond the
    /// buffer limit (1024) reaches it whole, with no gap notice — through `sink` and through a
    /// Combine subscriber that asks for unlimited demand in `receive(subscription:)`.
    @Test func aSourcesFirstBurstReachesItsFirstSubscriberWhole() throws {
        let bus = Bus()
        let burst = SourceRequest(id: "burst:a") { BurstSource(id: "burst:a") }
        let sunk = Collected<[Int]>([])
        let sink = bus.publisher(for: [.all], from: burst).sink { event in
            sunk.update { $0.append(Int(event["index"]?.intValue ?? -1)) }
        }
        #expect(sunk.value == Array(0..<BurstSource.size))
        sink.cancel()

        let subscriber = RecordingSubscriber()
        bus.publisher(for: [.all], from: burst).subscribe(subscriber)
        #expect(subscriber.events.map { Int($0["index"]?.intValue ?? -1) } == Array(0..<BurstSource.size))
        subscriber.cancel()
    }

    /// A first subscriber that cancels as soon as it has its subscription leaves the source
    /// never started (and so never stopped): nothing runs for nobody.
    @Test func aFirstSubscriberThatCancelsAtOnceLeavesTheSourceUnstarted() throws {
        let bus = Bus()
        let request = SourceRequest(id: "burst:b") { BurstSource(id: "burst:b") }
        let (starts0, stops0) = (BurstSource.starts.load(ordering: .relaxed), BurstSource.stops.load(ordering: .relaxed))
        let quitter = CancellingSubscriber()
        bus.publisher(for: [.all], from: request).subscribe(quitter)
        #expect(BurstSource.starts.load(ordering: .relaxed) == starts0)
        #expect(BurstSource.stops.load(ordering: .relaxed) == stops0)
        #expect(bus.statistics.sources.isEmpty)
        #expect(quitter.values == 0)
    }

    @Test func sourceSubscribersSeeOnlyTheirSourcesEvents() throws {
        let bus = Bus()
        let subscriber = RecordingSubscriber()
        bus.publisher(for: [.all], from: request).subscribe(subscriber)
        bus.post("probe.started")  // same name, posted by a user: not this source's
        #expect(subscriber.events.map(\.source) == ["probe:a"])
        subscriber.cancel()
    }

    @Test func finishingTheBusStopsItsSources() throws {
        let bus = Bus()
        let stops0 = ProbeSource.stops.load(ordering: .relaxed)
        let subscriber = RecordingSubscriber()
        bus.publisher(for: [.all], from: request).subscribe(subscriber)
        bus.finish()
        #expect(ProbeSource.stops.load(ordering: .relaxed) - stops0 == 1)
        #expect(subscriber.completions == 1)
    }
}

struct ProbeOptions: SourceOptions {
    static let kind = "probe"
    var target: String
    var description: String { target }
}

@Suite struct SourceKindTests {
    @Test func aKindWithoutDriverIsRefusedWithTheReason() {
        let bus = Bus()
        #expect {
            try bus.publisher(for: [.all], from: ProbeOptions(target: "x"))
        } throws: { ($0 as? EventBusError)?.code == .sourceUnavailable }
    }

    @Test func registeredDriversMakeOneSharedSourcePerOptions() throws {
        let bus = Bus()
        let made = Collected<[String]>([])
        bus.registerSource(kind: ProbeOptions.kind) { options, id in
            made.update { $0.append(id) }
            return ProbeSource(id: id)
        }
        #expect(bus.hasSource(kind: "probe"))
        let a = RecordingSubscriber(), b = RecordingSubscriber(), c = RecordingSubscriber()
        try bus.publisher(for: [.all], from: ProbeOptions(target: "x")).subscribe(a)
        try bus.publisher(for: [.all], from: ProbeOptions(target: "x")).subscribe(b)
        try bus.publisher(for: [.all], from: ProbeOptions(target: "y")).subscribe(c)
        #expect(made.value == ["probe:x", "probe:y"])
        #expect(bus.statistics.sources == ["probe:x": 2, "probe:y": 1])
        #expect(a.events.map(\.source) == ["probe:x"] && c.events.map(\.source) == ["probe:y"])
        for s in [a, b, c] { s.cancel() }
    }
}

/// Cancels in `receive(subscription:)`, before asking for anything.
final class CancellingSubscriber: Subscriber, @unchecked Sendable {
    typealias Input = Event
    typealias Failure = Never
    private(set) var values = 0
    func receive(subscription: Subscription) { subscription.cancel() }
    func receive(_ input: Event) -> Subscribers.Demand {
        values += 1
        return .none
    }
    func receive(completion: Subscribers.Completion<Never>) {}
}
