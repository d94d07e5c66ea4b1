import Dispatch
import EventBusKit
import Foundation
import Testing

@Suite struct MailboxTests {
    /// Marks a mailbox's queue so a test can tell where a call runs.
    static let onQueue = DispatchSpecificKey<String>()

    @Test func scopedSubscriptionsDeliverOnTheMailboxQueueOneAtATime() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "m")
        mailbox.queue.setSpecific(key: Self.onQueue, value: "m")
        let scoped = bus.scoped(to: mailbox)
        let subscriber = RecordingSubscriber()
        let queues = Collected<Set<String>>([])
        subscriber.onValue = { _ in
            queues.update { _ = $0.insert(DispatchQueue.getSpecific(key: Self.onQueue) ?? "elsewhere") }
            return .none
        }
        try scoped.publisher(for: "e.*").subscribe(subscriber)
        await withTaskGroup(of: Void.self) { group in
            for t in 0..<4 { group.addTask { for i in 0..<2_000 { bus.post("e.\(t)", fields: ["i": .int(Int64(i))]) } } }
        }
        #expect(await eventually { subscriber.events.count == 8_000 })
        #expect(queues.value == ["m"])
        #expect(subscriber.violations.isEmpty)
        let sequences = subscriber.events.map(\.sequence)
        #expect(sequences == sequences.sorted())
    }

    @Test func aStalledMailboxDropsItsOwnEventsWithAGapAndSlowsNobody() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "stalled", capacity: 10)
        let stalled = RecordingSubscriber()
        try bus.scoped(to: mailbox).publisher(for: "e.*").subscribe(stalled)
        let healthy = RecordingSubscriber()
        try bus.scoped(to: Mailbox(label: "healthy")).publisher(for: "e.*").subscribe(healthy)
        let inline = RecordingSubscriber()
        try bus.publisher(for: "e.*").subscribe(inline)

        let release = DispatchSemaphore(value: 0)
        let blocked = DispatchSemaphore(value: 0)
        mailbox.perform { blocked.signal(); release.wait() }
        blocked.wait()

        for i in 1...50 { bus.post("e.\(i)") }  // returns although the mailbox is stuck
        #expect(inline.events.count == 50)
        #expect(await eventually { healthy.events.count == 50 })
        #expect(mailbox.statistics.dropped == 40)
        #expect(mailbox.drain(timeout: .milliseconds(50)) == false)

        release.signal()
        #expect(await eventually { stalled.events.count == 11 })
        #expect(stalled.names.prefix(10) == ArraySlice((1...10).map { "e.\($0)" }))
        #expect(stalled.events[10].gap == Gap(dropped: 40, firstSequence: 11, lastSequence: 50))

        bus.post("e.51")  // room again: arrives after the gap
        #expect(await eventually { stalled.events.count == 12 })
        #expect(stalled.events[11].name == "e.51")
        #expect(mailbox.drain(timeout: patience))
        #expect(stalled.violations.isEmpty)
    }

    /// Events the queue took in a batch but has not run yet still count as queued: a handler
    /// stuck on the first of ten leaves nine waiting, whether they came in one batch or not.
    @Test func eventsTakenInABatchButNotRunCountAsQueued() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "batch")
        let release = DispatchSemaphore(value: 0)
        let subscriber = RecordingSubscriber()
        subscriber.onValue = { event in
            if event.name == "e.1" { release.wait() }
            return .none
        }
        try bus.scoped(to: mailbox).publisher(for: "e.*").subscribe(subscriber)
        for i in 1...10 { bus.post("e.\(i)") }
        #expect(await eventually { subscriber.events.count == 1 && mailbox.statistics.queued == 9 },
                "queued: \(mailbox.statistics.queued)")
        release.signal()
        #expect(await eventually { subscriber.events.count == 10 })
        #expect(mailbox.statistics.queued == 0)
    }

    /// The byte bound: a stalled subscriber's mailbox holds at most its bytes of events, those
    /// the queue took but has not run included; past that, drops come as one gap. An event
    /// larger than the whole bound still gets through when nothing waits.
    @Test func aStalledMailboxHoldsAtMostItsBytesCountingTheBatchItTook() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "bytes", capacity: 10_000, byteCapacity: 1 << 20)
        let entered = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let subscriber = RecordingSubscriber()
        subscriber.onValue = { event in
            if event.name == "e.first" { entered.signal(); release.wait() }
            return .none
        }
        try bus.scoped(to: mailbox).publisher(for: "e.*").subscribe(subscriber)
        func post(_ name: String, bytes: Int) { bus.post(name, fields: ["p": .string(String(repeating: "x", count: bytes))]) }

        // Three events of 300 kB, taken by the queue in one batch; the handler stalls on the first.
        let gate = DispatchSemaphore(value: 0)
        mailbox.perform { gate.wait() }
        post("e.first", bytes: 300_000)
        post("e.second", bytes: 300_000)
        post("e.third", bytes: 300_000)
        gate.signal()
        entered.wait()
        #expect(mailbox.statistics.queued == 2)
        let held = mailbox.statistics.queuedBytes
        #expect(held > 900_000 && held < 1 << 20, "\(held)")

        // Taken but not run, they still hold their bytes: a fourth does not fit, nor does a large one.
        post("e.fourth", bytes: 300_000)
        post("e.huge", bytes: 3 << 20)
        post("e.small", bytes: 10)  // fits
        #expect(mailbox.statistics.dropped == 2)

        release.signal()
        #expect(await eventually { subscriber.events.count == 5 })
        #expect(subscriber.names.prefix(3) == ["e.first", "e.second", "e.third"])
        #expect(subscriber.events[3].gap?.dropped == 2)  // where the drops were
        #expect(subscriber.events[4].name == "e.small")
        #expect(mailbox.drain(timeout: patience))
        #expect(mailbox.statistics.queuedBytes == 0)

        // Nothing waits: an event over the whole bound is delivered.
        post("e.huge", bytes: 3 << 20)
        #expect(await eventually { subscriber.events.count == 6 })
        #expect(subscriber.events[5].name == "e.huge")
        #expect(mailbox.statistics.dropped == 2)
        #expect(subscriber.violations.isEmpty)
    }

    @Test func demandAndCancelAreHandledOnTheMailbox() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "m")
        let subscriber = RecordingSubscriber(initialDemand: .max(2))
        try bus.scoped(to: mailbox).publisher(for: "e.*").subscribe(subscriber)
        for i in 1...5 { bus.post("e.\(i)") }
        #expect(mailbox.drain(timeout: patience))
        #expect(subscriber.names == ["e.1", "e.2"])
        subscriber.request(.max(1))
        #expect(mailbox.drain(timeout: patience))
        #expect(subscriber.names == ["e.1", "e.2", "e.3"])
        subscriber.cancel()
        subscriber.request(.unlimited)
        bus.post("e.6")
        #expect(mailbox.drain(timeout: patience))
        #expect(subscriber.names == ["e.1", "e.2", "e.3"])
        #expect(bus.statistics.subscriptions == 0)
        #expect(subscriber.violations.isEmpty)
    }

    @Test func finishReachesMailboxSubscribersOnTheirQueue() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "m")
        let subscriber = RecordingSubscriber()
        try bus.scoped(to: mailbox).publisher(for: ">").subscribe(subscriber)
        bus.post("e")
        bus.finish()
        #expect(mailbox.drain(timeout: patience))
        #expect(subscriber.names == ["e"])
        #expect(subscriber.completions == 1)
    }
}

/// A mailbox's queue may share a pool as narrow as the CPUs with other mailboxes (a host's
/// process-isolated modules do).
@Suite struct MailboxPoolTests {
    /// One that never empties gives its thread back every few thousand events, so another
    /// queue on the same pool — here a pool of one thread — gets its turn before it empties.
    @Test func aBusyMailboxTakesTurnsWithTheOthersOnItsPool() async throws {
        let pool = DispatchQueue(label: "a pool of one thread")
        let bus = Bus()
        let busy = Mailbox(label: "busy", capacity: 100_000, pool: pool)
        let other = Mailbox(label: "other", pool: pool)
        let busySubscriber = RecordingSubscriber()
        try bus.scoped(to: busy).publisher(for: "busy").subscribe(busySubscriber)
        let otherSubscriber = RecordingSubscriber()
        let busyDeliveredBeforeOther = Collected<Int?>(nil)
        otherSubscriber.onValue = { _ in
            busyDeliveredBeforeOther.update { $0 = busySubscriber.events.count }
            return .none
        }
        try bus.scoped(to: other).publisher(for: "other").subscribe(otherSubscriber)
        #expect(busy.drain(timeout: patience) && other.drain(timeout: patience))

        let gate = DispatchSemaphore(value: 0)
        pool.async { gate.wait() }  // both queues' runs wait behind this, the busy one first
        for _ in 0..<20_000 { bus.post("busy") }
        bus.post("other")
        #expect(await eventually { busy.statistics.queued == 20_000 && other.statistics.queued == 1 })
        gate.signal()

        #expect(await eventually { busySubscriber.events.count == 20_000 && otherSubscriber.events.count == 1 })
        let seen = try #require(busyDeliveredBeforeOther.value)
        #expect(seen > 0 && seen < 20_000, "the other mailbox ran after \(seen) of the busy one's events")
        #expect(busy.statistics.dropped == 0)
    }
}
