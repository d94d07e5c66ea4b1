import EventBusKit
import Foundation
import Testing

/// `Bus.post(contentsOf:)`: a batch keeps every rule of single posts — order, contiguous
/// sequence numbers, demand, gap notices, re-entrant posts queued, cancel seen at once.
@Suite struct BusBatchPostTests {
    private static func events(_ prefix: String, _ range: ClosedRange<Int>) -> [Event] {
        range.map { Event(name: "\(prefix).\($0)", fields: ["i": .int(Int64($0))]) }
    }

    @Test func aBatchIsDeliveredInOrderWithContiguousSequenceNumbers() throws {
        let bus = Bus()
        let all = RecordingSubscriber()
        let some = RecordingSubscriber()
        try bus.publisher(for: ">").subscribe(all)
        try bus.publisher(for: "b.2", "b.4").subscribe(some)

        #expect(bus.post("a.0") == 1)
        let numbers = bus.post(contentsOf: Self.events("b", 1...5))
        #expect(bus.post("c.0") == 7)

        #expect(numbers == 2..<7)
        #expect(all.names == ["a.0", "b.1", "b.2", "b.3", "b.4", "b.5", "c.0"])
        #expect(all.events.map(\.sequence) == Array(1...7))
        #expect(all.events[1...5].map { $0["i"]?.intValue } == [1, 2, 3, 4, 5])
        #expect(some.names == ["b.2", "b.4"])
        #expect(some.events.map(\.sequence) == [3, 5])
        #expect(bus.statistics.posted == 7)
        #expect(all.violations.isEmpty && some.violations.isEmpty)
    }

    @Test func aBatchFromANonContiguousCollectionAndAnEmptyBatch() throws {
        let bus = Bus()
        let all = RecordingSubscriber()
        try bus.publisher(for: ">").subscribe(all)
        #expect(bus.post(contentsOf: [Event]()).isEmpty)
        #expect(bus.post(contentsOf: (1...3).lazy.map { Event(name: "lazy.\($0)") }) == 1..<4)
        #expect(all.names == ["lazy.1", "lazy.2", "lazy.3"])
        #expect(bus.statistics.posted == 3, "an empty batch takes no number")
    }

    @Test func aBatchNeverExceedsDemandHoldsTheRestAndAnnouncesWhatItDrops() throws {
        let bus = Bus()
        let subscriber = RecordingSubscriber(initialDemand: .max(2))
        try bus.publisher(for: "e.*").bufferLimit(3).subscribe(subscriber)
        bus.post(contentsOf: Self.events("e", 1...10))  // 1, 2 delivered; 3...5 held; 6...10 dropped
        #expect(subscriber.names == ["e.1", "e.2"])

        subscriber.request(.unlimited)
        #expect(subscriber.names == ["e.1", "e.2", "e.3", "e.4", "e.5", "bus.gap"])
        #expect(subscriber.events[5].gap == Gap(dropped: 5, firstSequence: 6, lastSequence: 10))
        bus.post(contentsOf: Self.events("e", 11...12))
        #expect(subscriber.names.suffix(2) == ["e.11", "e.12"])
        #expect(subscriber.violations.isEmpty)
    }

    @Test func demandReturnedFromReceiveCountsWithinTheBatch() throws {
        let bus = Bus()
        let subscriber = RecordingSubscriber(initialDemand: .max(1))
        subscriber.onValue = { event in event.name == "e.1" ? .max(2) : .none }
        try bus.publisher(for: "e.*").subscribe(subscriber)
        bus.post(contentsOf: Self.events("e", 1...6))
        #expect(subscriber.names == ["e.1", "e.2", "e.3"])
        #expect(subscriber.violations.isEmpty)
    }

    @Test func aPostFromInsideASubscriberDuringABatchComesAfterTheBatch() throws {
        let bus = Bus()
        let order = Collected<[String]>([])
        let first = try bus.publisher(for: ">").sink { event in
            order.update { $0.append("first:\(event.name)") }
            if event.name == "b.1" { bus.post("inner") }
            if event.name == "inner" { bus.post(contentsOf: Self.events("nested", 1...2)) }
        }
        let second = try bus.publisher(for: ">").sink { event in order.update { $0.append("second:\(event.name):\(event.sequence)") } }
        let numbers = bus.post(contentsOf: Self.events("b", 1...2))
        #expect(numbers == 1..<3)
        #expect(order.value == [
            "first:b.1", "second:b.1:1", "first:b.2", "second:b.2:2",
            "first:inner", "second:inner:3",
            "first:nested.1", "second:nested.1:4", "first:nested.2", "second:nested.2:5",
        ])
        withExtendedLifetime((first, second)) {}
    }

    @Test func aSubscriberCancelledDuringABatchGetsNothingMore() throws {
        let bus = Bus()
        let quitter = RecordingSubscriber()
        quitter.onValue = { [unowned quitter] event in
            if event.name == "e.2" { quitter.cancel() }
            return .none
        }
        let stayer = RecordingSubscriber()
        try bus.publisher(for: "e.*").subscribe(quitter)
        try bus.publisher(for: "e.*").subscribe(stayer)
        bus.post(contentsOf: Self.events("e", 1...5))
        #expect(quitter.names == ["e.1", "e.2"])
        #expect(stayer.names == ["e.1", "e.2", "e.3", "e.4", "e.5"])
        #expect(bus.statistics.subscriptions == 1)
        #expect(quitter.completions == 0)
    }

    @Test func aFinishedBusTakesNoBatch() throws {
        let bus = Bus()
        let subscriber = RecordingSubscriber()
        try bus.publisher(for: ">").subscribe(subscriber)
        bus.post(contentsOf: Self.events("e", 1...2))
        bus.finish()
        #expect(bus.post(contentsOf: Self.events("e", 3...4)).isEmpty)
        #expect(subscriber.names == ["e.1", "e.2"])
        #expect(subscriber.completions == 1)
        #expect(bus.statistics.posted == 2)
    }

    @Test func aMailboxSubscriberGetsTheBatchInOrderOnItsQueue() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "batch")
        let subscriber = RecordingSubscriber()
        try bus.scoped(to: mailbox).publisher(for: "e.*").subscribe(subscriber)
        bus.post(contentsOf: Self.events("e", 1...300))
        #expect(await eventually { subscriber.events.count == 300 })
        #expect(subscriber.events.map(\.sequence) == Array(1...300))
        #expect(subscriber.violations.isEmpty)
    }

    /// Batches and single posts from several threads at once, while subscriptions come and go:
    /// every subscriber sees one total order — sequence numbers strictly increasing — each batch
    /// as one contiguous run, and each poster's own order.
    @Test func concurrentBatchAndSinglePostersKeepOneTotalOrder() async throws {
        let bus = Bus()
        let subscribers = (0..<3).map { _ in RecordingSubscriber() }
        for subscriber in subscribers { try bus.publisher(for: "load.>").subscribe(subscriber) }
        let threads = 4, batches = 300, batchSize = 7
        let returned = Collected<[Range<UInt64>]>([])
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<threads {
                group.addTask {
                    var mine: [Range<UInt64>] = []
                    for batch in 0..<batches {
                        let events = (0..<batchSize).map { i in
                            Event(name: "load.t\(thread)", fields: ["i": .int(Int64(batch * (batchSize + 1) + i))])
                        }
                        mine.append(bus.post(contentsOf: events))
                        let single = bus.post("load.t\(thread)", fields: ["i": .int(Int64(batch * (batchSize + 1) + batchSize))])
                        mine.append(single..<(single + 1))
                    }
                    returned.update { $0.append(contentsOf: mine) }
                }
            }
            group.addTask {  // subscriptions made and cancelled meanwhile change the routes
                for _ in 0..<200 {
                    let passer = RecordingSubscriber()
                    try? bus.publisher(for: "load.t0").subscribe(passer)
                    passer.cancel()
                    #expect(passer.violations.isEmpty)
                }
            }
        }
        let total = threads * batches * (batchSize + 1)
        let ranges = returned.value
        #expect(ranges.reduce(0) { $0 + $1.count } == total)
        #expect(ranges.allSatisfy { $0.count == batchSize || $0.count == 1 })
        #expect(Set(ranges.flatMap { Array($0) }) == Set(1...UInt64(total)), "numbers unique and contiguous")
        for subscriber in subscribers {
            let events = subscriber.events
            #expect(events.map(\.sequence) == Array(1...UInt64(total)))
            for thread in 0..<threads {
                let mine = events.filter { $0.name == "load.t\(thread)" }.compactMap { $0["i"]?.intValue }
                #expect(mine == (0..<Int64(batches * (batchSize + 1))).map { $0 })
            }
            #expect(subscriber.violations.isEmpty)
        }
        // Each batch reached the subscribers as the run of numbers it was given.
        let bySequence = Dictionary(uniqueKeysWithValues: subscribers[0].events.map { ($0.sequence, $0) })
        for range in ranges where range.count == batchSize {
            let names = Set(range.map { bySequence[$0]!.name })
            #expect(names.count == 1)
        }
    }

    // MARK: Runs: events that reach one subscription go to it in one call

    /// Heap-allocated names, sources and fields (over 15 bytes, so not inline strings): what the
    /// batch path hands on without copying must be whole, and what a subscriber keeps must stay
    /// valid after the caller's batch is gone.
    private static func heapEvents(_ name: String, _ range: ClosedRange<Int>, source: String = "user") -> [Event] {
        range.map { Event(name: name, source: source, fields: ["text": .string("a field long enough for the heap #\($0)"), "i": .int(Int64($0))]) }
    }

    @Test func eventsASubscriberKeepsFromABatchOutliveTheBatch() throws {
        let bus = Bus()
        let kept = Collected<[Event]>([])
        let sink = try bus.publisher(for: "a.rather.long.event.name.*").sink { event in kept.update { $0.append(event) } }
        let combine = RecordingSubscriber()
        try bus.publisher(for: "a.rather.long.event.name.*").subscribe(combine)
        let solo = RecordingSubscriber()
        try bus.publisher(for: "another.long.event.name.for.one").subscribe(solo)
        do {
            var batch = Self.heapEvents("a.rather.long.event.name.x", 1...40, source: "a source name on the heap")
            batch += Self.heapEvents("another.long.event.name.for.one", 41...80)
            #expect(bus.post(contentsOf: batch) == 1..<81)
        }  // the batch is gone
        #expect(kept.value.map(\.sequence) == Array(1...40))
        #expect(kept.value.map { $0["text"]?.stringValue } == (1...40).map { "a field long enough for the heap #\($0)" })
        #expect(kept.value.allSatisfy { $0.name == "a.rather.long.event.name.x" && $0.source == "a source name on the heap" })
        #expect(combine.events.map(\.sequence) == Array(1...40))
        #expect(solo.events.map(\.sequence) == Array(41...80))
        #expect(solo.events.map { $0["i"]?.intValue } == (41...80).map { Int64($0) })
        withExtendedLifetime(sink) {}
    }

    /// No reference is taken or given back for the events handed on: once the batch and the
    /// events a subscriber kept are gone, each event's fields are freed (a reference too many
    /// would keep them; one too few would free them under the caller — the test above).
    @Test func aBatchLeavesNoReferenceBehind() throws {
        // The fields' storage, seen weakly: a Dictionary is one reference to it on Linux.
        #expect(MemoryLayout<[String: FieldValue]>.size == MemoryLayout<AnyObject>.size)
        final class Weak { weak var object: AnyObject?; init(_ object: AnyObject) { self.object = object } }
        let bus = Bus()
        let kept = Collected<[Event]>([])
        let keeper = try bus.publisher(for: "heap.kept").sink { event in kept.update { $0.append(event) } }
        let counted = Collected<Int>(0)
        let counter = try bus.publisher(for: "heap.*").sink { _ in counted.update { $0 += 1 } }
        let combine = RecordingSubscriber(initialDemand: .none)  // holds what it gets (bounded demand)
        try bus.publisher(for: "heap.held").subscribe(combine)
        var fields: [Weak] = []
        do {
            // Runs for one subscription, events shared by two, and events held for a third.
            let batch = ["heap.solo", "heap.kept", "heap.held"].flatMap { name in
                (0..<32).map { Event(name: name, fields: ["text": .string("\(name): a string the heap must free, #\($0)")]) }
            }
            fields = batch.map { Weak(unsafeBitCast($0.fields, to: AnyObject.self)) }
            bus.post(contentsOf: batch)
        }
        #expect(counted.value == 96)
        #expect(fields[..<32].allSatisfy { $0.object == nil }, "delivered and dropped: freed")
        #expect(fields[32...].allSatisfy { $0.object != nil }, "kept by a subscriber, or held for one: alive")
        kept.update { $0.removeAll() }
        combine.cancel()
        #expect(fields.allSatisfy { $0.object == nil })
        withExtendedLifetime((keeper, counter)) {}
    }

    /// A handler that subscribes during a run: the new subscription gets the batch's events after
    /// that point, exactly as it would from single posts.
    @Test func aSubscriptionMadeDuringARunGetsTheRestOfTheBatch() throws {
        let bus = Bus()
        let late = RecordingSubscriber()
        let seen = Collected<[UInt64]>([])
        let first = try bus.publisher(for: "r.*").sink { event in
            seen.update { $0.append(event.sequence) }
            if event.sequence == 3 { try? bus.publisher(for: "r.*").subscribe(late) }
        }
        #expect(bus.post(contentsOf: Self.heapEvents("r.x", 1...8)) == 1..<9)
        #expect(seen.value == Array(1...8))
        #expect(late.events.map(\.sequence) == Array(4...8))
        #expect(late.violations.isEmpty)
        withExtendedLifetime(first) {}
    }

    @Test func aSinkCancelledDuringARunGetsNothingMore() throws {
        let bus = Bus()
        let seen = Collected<[UInt64]>([])
        final class Holder: @unchecked Sendable { var cancellable: AnyCancellable? }
        let holder = Holder()
        holder.cancellable = try bus.publisher(for: "r.*").sink { event in
            seen.update { $0.append(event.sequence) }
            if event.sequence == 2 { holder.cancellable?.cancel() }
        }
        bus.post(contentsOf: Self.heapEvents("r.x", 1...6))
        #expect(seen.value == [1, 2])
        #expect(bus.statistics.subscriptions == 0)
    }

    /// Names that reach one subscription and names that reach several, interleaved, and a
    /// subscription that wants one source only — inline and through mailboxes: each gets exactly
    /// its events, in order. `mix.a` reaches `onlyA` alone and `mix.b` `shared` alone (runs),
    /// `mix.c` both `shared` and `fromProbe` (one by one), `mix.d` `fromProbe` alone (a run that
    /// skips the events of other sources).
    @Test(arguments: [false, true]) func runsAndSharedEventsInterleaved(throughMailboxes: Bool) async throws {
        let bus = Bus()
        let probe = SourceRequest(id: "probe:runs") { ProbeSource(id: "probe:runs") }
        let shared = RecordingSubscriber(), onlyA = RecordingSubscriber(), fromProbe = RecordingSubscriber()
        let mailbox = Mailbox(label: "runs")
        let lane = throughMailboxes ? bus.scoped(to: mailbox) : bus
        try bus.publisher(for: "mix.b", "mix.c").subscribe(shared)
        try lane.publisher(for: "mix.a").subscribe(onlyA)
        lane.publisher(for: [try EventPattern("mix.c"), try EventPattern("mix.d")], from: probe).subscribe(fromProbe)
        let started = bus.statistics.posted  // the probe posted `probe.started` when it started
        let pattern = ["mix.a", "mix.a", "mix.b", "mix.b", "mix.a", "mix.c", "mix.c", "mix.d", "mix.d", "mix.d", "mix.a"]
        let batch = (0..<110).map { i in
            Event(name: pattern[i % pattern.count], source: i % 3 == 0 ? "probe:runs" : "user", fields: ["i": .int(Int64(i))])
        }
        bus.post(contentsOf: batch)
        #expect(mailbox.drain(timeout: patience))
        func expected(_ wanted: (Int) -> Bool) -> [UInt64] { batch.indices.filter(wanted).map { started + 1 + UInt64($0) } }
        #expect(onlyA.events.map(\.sequence) == expected { batch[$0].name == "mix.a" })
        #expect(shared.events.map(\.sequence) == expected { ["mix.b", "mix.c"].contains(batch[$0].name) })
        #expect(fromProbe.events.map(\.sequence) == expected { ["mix.c", "mix.d"].contains(batch[$0].name) && $0 % 3 == 0 })
        #expect(fromProbe.events.allSatisfy { $0.source == "probe:runs" && $0["i"]?.intValue.map { $0 % 3 == 0 } == true })
        for subscriber in [shared, onlyA, fromProbe] { #expect(subscriber.violations.isEmpty) }
        fromProbe.cancel()
    }

    /// A run into a mailbox goes in under one lock, and keeps the mailbox's bound: what does not
    /// fit is dropped, counted and announced by one gap notice in its place.
    @Test func aRunIntoAStalledMailboxKeepsItsBoundAndAnnouncesTheRest() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "stalled-run", capacity: 10)
        let stalled = RecordingSubscriber()
        try bus.scoped(to: mailbox).publisher(for: "m.tick").subscribe(stalled)
        let release = DispatchSemaphore(value: 0)
        let blocked = DispatchSemaphore(value: 0)
        mailbox.perform { blocked.signal(); release.wait() }
        try await blocking { blocked.wait() }

        #expect(bus.post(contentsOf: Self.heapEvents("m.tick", 1...50)) == 1..<51)  // returns although the mailbox is stuck
        #expect(mailbox.statistics.dropped == 40)
        #expect(mailbox.statistics.queued == 10)
        release.signal()
        #expect(await eventually { stalled.events.count == 11 })
        #expect(stalled.events.prefix(10).map { $0["i"]?.intValue } == (1...10).map { Int64($0) })
        #expect(stalled.events[10].gap == Gap(dropped: 40, firstSequence: 11, lastSequence: 50))
        #expect(stalled.violations.isEmpty)
    }
}
