import EventBusKit
import Synchronization
import Testing

/// The bus tells a running shared source when another subscriber joins (the units source posts
/// its snapshot again then), and never the first one, which gets `start` instead.
struct SubscriberJoinedTests {
    private final class CountingSource: EventSource, @unchecked Sendable {
        let calls = Mutex<[String]>([])
        func start(posting bus: Bus) { calls.withLock { $0.append("start") } }
        func stop() { calls.withLock { $0.append("stop") } }
        func subscriberJoined() { calls.withLock { $0.append("joined") } }
    }

    @Test func joinersAfterTheFirstAreAnnounced() throws {
        let bus = Bus()
        let source = CountingSource()
        let request = SourceRequest(id: "counting") { source }
        let first = bus.publisher(for: [try EventPattern(">")], from: request).sink { _ in }
        let second = bus.publisher(for: [try EventPattern(">")], from: request).sink { _ in }
        let third = bus.publisher(for: [try EventPattern(">")], from: request).sink { _ in }
        #expect(source.calls.withLock { $0 } == ["start", "joined", "joined"])
        first.cancel()
        second.cancel()
        third.cancel()
        #expect(source.calls.withLock { $0 } == ["start", "joined", "joined", "stop"])
    }

    @Test func aSourceWithoutTheHookNeedsNothing() throws {
        final class Plain: EventSource, @unchecked Sendable {
            func start(posting bus: Bus) {}
            func stop() {}
        }
        let bus = Bus()
        let request = SourceRequest(id: "plain") { Plain() }
        let subscriptions = try (0..<2).map { _ in bus.publisher(for: [try EventPattern(">")], from: request).sink { _ in } }
        #expect(bus.statistics.sources["plain"] == 2)
        subscriptions.forEach { $0.cancel() }
    }
}
