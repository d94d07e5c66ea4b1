import Dispatch
import EventBusKit
import Foundation
import Synchronization
import Testing
import TestSupport

/// Stands in for the devices and units sources, which the SDK cannot run: a thread that, once
/// started, posts a snapshot to everyone (`snap.status`, `snap.item`s, `snap.done` with
/// `changes`: how many changes it covers), then posts changes to everyone (`snap.change`, `n`
/// counting from 1) and, before each, greets the joiners waiting with a snapshot of their own —
/// as the devices monitor thread does between two messages and the units connection between
/// two dispatches.
final class SnapshotSource: GreetsJoiningSubscribers, @unchecked Sendable {
    let id: String
    private let waiting = Collected<[SubscriberGreeting]>([])
    private let stopping = Atomic<Bool>(false)
    private let exited = DispatchSemaphore(value: 0)

    init(id: String) { self.id = id }

    func start(posting bus: Bus) {
        Thread.detachNewThread { [self] in run(bus) }
    }

    func stop() {
        stopping.store(true, ordering: .releasing)
        exited.wait()
    }

    func subscriberJoined(_ greeting: SubscriberGreeting) {
        waiting.update { $0.append(greeting) }
    }

    private func snapshot(covering changes: Int) -> [Event] {
        [Event(name: "snap.status", source: id)]
            + (0..<3).map { Event(name: "snap.item", source: id, fields: ["index": .int(Int64($0))]) }
            + [Event(name: "snap.done", source: id, fields: ["changes": .int(Int64(changes))])]
    }

    private func run(_ bus: Bus) {
        defer { exited.signal() }
        bus.post(contentsOf: snapshot(covering: 0))
        var changes = 0
        while !stopping.load(ordering: .acquiring) {
            let joined = waiting.update { waiting in
                defer { waiting.removeAll() }
                return waiting
            }
            for greeting in joined { greeting.post(contentsOf: snapshot(covering: changes)) }
            changes += 1
            bus.post(Event(name: "snap.change", source: id, fields: ["n": .int(Int64(changes))]))
            usleep(20)  // the source's pace: changes keep coming while subscribers join
        }
    }
}

/// The subscriptions made on several threads, for the test to cancel.
private final class Subscriptions: @unchecked Sendable {
    // @unchecked: `all` is only touched under `lock`.
    private let lock = NSLock()
    private var all: [AnyCancellable] = []

    func keep(_ subscription: AnyCancellable) { lock.withLock { all.append(subscription) } }
    func cancelAll() { lock.withLock { all }.forEach { $0.cancel() } }
}

/// ``GreetsJoiningSubscribers`` under joins at any moment: subscribers join a source while it
/// starts — before its first snapshot is posted, while that is delivered, after — and each gets
/// exactly one snapshot, first, and then every change after the ones it covers, once.
@Suite struct JoiningSubscriberTests {
    @Test func everySubscriberGetsExactlyOneSnapshotFirstWhateverTheMomentItJoins() async throws {
        var random = SplitMix(seed: 46)
        let subscribers = 6
        for round in 0..<60 {
            let bus = Bus()
            let id = "snap:\(round)"
            let request = SourceRequest(id: id) { SnapshotSource(id: id) }
            let pattern = try EventPattern("snap.>")
            let streams = (0..<subscribers).map { _ in Collected<[Event]>([]) }
            let cancellables = Subscriptions()
            // Each joins after its own amount of work, so the joins spread around the start.
            let delays = (0..<subscribers).map { _ in random.below(200_000) }
            DispatchQueue.concurrentPerform(iterations: subscribers) { index in
                var spin = 0
                for step in 0..<delays[index] { spin &+= step }
                let stream = streams[index]
                let subscription = bus.publisher(for: [pattern], from: request).sink { event in stream.update { $0.append(event) } }
                cancellables.keep(subscription)
                withExtendedLifetime(spin) {}
            }
            // Until each has its snapshot and a change after it.
            #expect(await eventually { streams.allSatisfy { $0.value.contains { $0.name == "snap.done" } && $0.value.last?.name == "snap.change" } })
            cancellables.cancelAll()

            for (index, stream) in streams.enumerated() {
                let events = stream.value
                let names = events.map(\.name)
                #expect(names.first == "snap.status", "round \(round), subscriber \(index): \(names.prefix(8))")
                #expect(names.filter { $0 == "snap.done" }.count == 1, "round \(round), subscriber \(index): \(names.prefix(16))")
                guard let done = events.firstIndex(where: { $0.name == "snap.done" }),
                      case .int(let covered)? = events[done].fields["changes"] else { continue }
                #expect(names[..<done] == ["snap.status", "snap.item", "snap.item", "snap.item"], "round \(round), subscriber \(index)")
                let changes = events[(done + 1)...].map { $0.fields["n"] }
                let expected = (1...changes.count).map { FieldValue.int(covered + Int64($0)) }
                #expect(changes == expected, "round \(round), subscriber \(index): after a snapshot of \(covered), \(changes.prefix(5))")
            }
        }
    }
}
