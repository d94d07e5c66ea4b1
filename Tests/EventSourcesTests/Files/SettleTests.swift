import Dispatch
import EventBusKit
@testable import EventSources
import Foundation
import Synchronization
import Testing

/// A scheduler on virtual time: actions run only when the test advances the clock, in deadline
/// order, on the test's thread. Serial by construction.
final class FileTestScheduler: Scheduler, @unchecked Sendable {
    typealias SchedulerTimeType = DispatchQueue.SchedulerTimeType
    typealias SchedulerOptions = Never

    private struct Item: @unchecked Sendable {  // actions run on the test thread only
        let deadline: UInt64
        let order: Int
        let action: () -> Void
    }

    private let state = Mutex<(now: UInt64, items: [Item], order: Int)>((1_000_000_000, [], 0))

    var now: SchedulerTimeType { SchedulerTimeType(DispatchTime(uptimeNanoseconds: state.withLock { $0.now })) }
    var minimumTolerance: SchedulerTimeType.Stride { .zero }

    func schedule(options: Never?, _ action: @escaping () -> Void) {
        state.withLock { $0.order += 1; $0.items.append(Item(deadline: $0.now, order: $0.order, action: action)) }
    }

    func schedule(after date: SchedulerTimeType, tolerance: SchedulerTimeType.Stride, options: Never?,
                  _ action: @escaping () -> Void) {
        state.withLock {
            $0.order += 1
            $0.items.append(Item(deadline: date.dispatchTime.uptimeNanoseconds, order: $0.order, action: action))
        }
    }

    func schedule(after date: SchedulerTimeType, interval: SchedulerTimeType.Stride, tolerance: SchedulerTimeType.Stride,
                  options: Never?, _ action: @escaping () -> Void) -> Cancellable {
        fatalError("settle does not use repeating schedules")
    }

    /// Runs everything due within `nanoseconds` from now, moving the clock as it goes.
    func advance(by nanoseconds: UInt64) {
        let end = state.withLock { $0.now } + nanoseconds
        while let item = state.withLock({ state -> Item? in
            guard let next = state.items.filter({ $0.deadline <= end })
                .min(by: { ($0.deadline, $0.order) < ($1.deadline, $1.order) }) else { return nil }
            state.items.removeAll { $0.order == next.order }
            state.now = max(state.now, next.deadline)
            return next
        }) {
            item.action()
        }
        state.withLock { $0.now = end }
    }
}

@Suite struct SettleTests {
    func change(_ kind: FileChange.Kind, _ path: String) -> Event {
        Event(name: kind.eventName, source: "files:/t", fields: FileChange(kind: kind, path: path).fields)
    }

    @Test func aBurstPerPathBecomesOneEventAfterTheQuietPeriod() {
        let scheduler = FileTestScheduler()
        let subject = PassthroughSubject<Event, Never>()
        let received = Mutex<[Event]>([])
        let sink = subject.settle(for: .milliseconds(100), scheduler: scheduler)
            .sink { event in received.withLock { $0.append(event) } }

        subject.send(change(.created, "/t/a"))
        subject.send(change(.modified, "/t/a"))
        subject.send(change(.created, "/t/b"))
        scheduler.advance(by: 60_000_000)
        subject.send(change(.closedAfterWrite, "/t/a"))  // 60 ms in: /t/a's quiet period restarts
        scheduler.advance(by: 60_000_000)
        // /t/b has been quiet for 120 ms, /t/a for 60.
        #expect(received.withLock { $0.map(\.fileChange?.path) } == ["/t/b"])
        scheduler.advance(by: 60_000_000)
        let events = received.withLock { $0 }
        #expect(events.map(\.fileChange?.path) == ["/t/b", "/t/a"])
        #expect(events[1].name == "fs.closed")
        #expect(events[1].settledBurst == SettledBurst(count: 3, eventNames: ["fs.created", "fs.modified", "fs.closed"]))
        #expect(events[0].settledBurst?.count == 1)
        withExtendedLifetime(sink) {}
    }

    @Test func noticesPassAtOnceAndNothingIsDroppedWithoutDemandOrAtCompletion() {
        let scheduler = FileTestScheduler()
        let subject = PassthroughSubject<Event, Never>()
        let received = Mutex<[String]>([])
        let completed = Mutex(false)
        var subscription: Subscription?
        let subscriber = AnySubscriber<Event, Never>(
            receiveSubscription: { subscription = $0 },
            receiveValue: { event in received.withLock { $0.append(event.fileChange!.path + " " + event.name) }; return .none },
            receiveCompletion: { _ in completed.withLock { $0 = true } })
        subject.settle(for: .milliseconds(100), scheduler: scheduler).subscribe(subscriber)

        subject.send(change(.modified, "/t/a"))
        subject.send(change(.overflow, "/t"))
        scheduler.advance(by: 200_000_000)
        #expect(received.withLock { $0 }.isEmpty, "no demand yet")
        subject.send(change(.modified, "/t/a"))  // settles again while the first burst waits: merged
        subject.send(change(.deleted, "/t/b"))
        scheduler.advance(by: 200_000_000)

        subscription?.request(.max(1))
        scheduler.advance(by: 0)
        #expect(received.withLock { $0 } == ["/t fs.overflow"])
        subscription?.request(.unlimited)
        scheduler.advance(by: 0)
        #expect(received.withLock { $0 } == ["/t fs.overflow", "/t/a fs.modified", "/t/b fs.deleted"])

        subject.send(change(.created, "/t/c"))
        subject.send(completion: .finished)  // /t/c is still settling: emitted before the completion
        scheduler.advance(by: 0)
        #expect(received.withLock { $0.last } == "/t/c fs.created")
        #expect(completed.withLock { $0 })
    }

    @Test func cancelStopsEverything() {
        let scheduler = FileTestScheduler()
        let subject = PassthroughSubject<Event, Never>()
        let received = Mutex(0)
        let sink = subject.settle(for: .milliseconds(10), scheduler: scheduler)
            .sink { _ in received.withLock { $0 += 1 } }
        subject.send(change(.created, "/t/a"))
        sink.cancel()
        scheduler.advance(by: 100_000_000)
        subject.send(change(.created, "/t/b"))
        scheduler.advance(by: 100_000_000)
        #expect(received.withLock { $0 } == 0)
    }

    @Test func settlesRealWritesOnADispatchQueue() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        let queue = DispatchQueue(label: "settle-test")
        let received = Mutex<[Event]>([])
        let sink = try harness.bus.files(at: scratch.path)
            .settle(for: .milliseconds(200), scheduler: queue)
            .sink { event in received.withLock { $0.append(event) } }
        _ = harness.monitor.statistics

        let file = scratch.at("log")
        let fd = open(file, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
        for _ in 0..<50 { _ = write(fd, "line\n", 5) }
        close(fd)

        // One burst unless the writer stalled for the whole quiet period; either way every
        // change is accounted for, and the last settled event is the close.
        #expect(await eventually { received.withLock { $0 }.last?.name == "fs.closed" })
        let events = received.withLock { $0 }
        #expect(events.allSatisfy { $0.fileChange?.path == file })
        let names = Set(events.flatMap { $0.settledBurst?.eventNames ?? [] })
        #expect(names == ["fs.created", "fs.modified", "fs.closed"])
        #expect(events.count < 50, "the writes were coalesced")
        withExtendedLifetime(sink) {}
    }
}
