import EventBusKit
import Foundation
import Testing

@Suite struct BusDeliveryTests {
    @Test func deliversMatchingEventsInOrderWithIncreasingSequence() throws {
        let bus = Bus()
        let fs = RecordingSubscriber()
        let all = RecordingSubscriber()
        try bus.publisher(for: "fs.*").subscribe(fs)
        try bus.publisher(for: ">").subscribe(all)

        let posted = [bus.post("fs.created", fields: ["path": "/tmp/a"]),
                      bus.post("timer.tick"),
                      bus.post(Event(name: "fs.deleted", fields: ["path": "/tmp/a"]))]

        #expect(fs.names == ["fs.created", "fs.deleted"])
        #expect(all.names == ["fs.created", "timer.tick", "fs.deleted"])
        #expect(all.events.map(\.sequence) == [1, 2, 3])
        #expect(posted == [1, 2, 3], "post returns the sequence number it assigned")
        #expect(fs.events[0]["path"] == "/tmp/a")
        #expect(fs.events[0].source == "user")
        #expect(fs.violations.isEmpty && all.violations.isEmpty)
    }

    @Test func aPostWithoutSourceIsFromItsMailboxOwnerOrTheUser() throws {
        let bus = Bus()
        let all = RecordingSubscriber()
        try bus.publisher(for: ">").subscribe(all)
        let module = bus.scoped(to: Mailbox(label: "deployer"))
        module.post("app.deployed")
        module.post("app.audited", source: "audit")
        bus.post("app.manual")
        #expect(all.events.map(\.source) == ["deployer", "audit", "user"])
    }

    @Test func sinkReceivesEventsAndStopsAtCancel() throws {
        let bus = Bus()
        let got = Collected<[String]>([])
        let cancellable = try bus.publisher(for: "a.>").sink { event in got.update { $0.append(event.name) } }
        bus.post("a.one")
        cancellable.cancel()
        bus.post("a.two")
        #expect(got.value == ["a.one"])
        #expect(bus.statistics.subscriptions == 0)
    }

    @Test func neverDeliversBeyondDemandAndHoldsTheRest() throws {
        let bus = Bus()
        let subscriber = RecordingSubscriber(initialDemand: .max(1))
        try bus.publisher(for: "e.*").subscribe(subscriber)
        for i in 1...5 { bus.post("e.\(i)") }
        #expect(subscriber.names == ["e.1"])

        subscriber.request(.max(2))
        #expect(subscriber.names == ["e.1", "e.2", "e.3"])

        subscriber.request(.unlimited)
        bus.post("e.6")
        #expect(subscriber.names == ["e.1", "e.2", "e.3", "e.4", "e.5", "e.6"])
        #expect(subscriber.violations.isEmpty)
    }

    @Test func demandReturnedFromReceiveIsHonoured() throws {
        let bus = Bus()
        let subscriber = RecordingSubscriber(initialDemand: .max(1))
        subscriber.onValue = { event in event.name == "e.1" ? .max(2) : .none }
        try bus.publisher(for: "e.*").subscribe(subscriber)
        for i in 1...6 { bus.post("e.\(i)") }
        #expect(subscriber.names == ["e.1", "e.2", "e.3"])
        #expect(subscriber.violations.isEmpty)
    }

    @Test func overflowDropsTheNewestAndAnnouncesOneGapInTheirPlace() throws {
        let bus = Bus()
        let subscriber = RecordingSubscriber(initialDemand: .none)
        try bus.publisher(for: "e.*").bufferLimit(3).subscribe(subscriber)
        for i in 1...10 { bus.post("e.\(i)") }  // sequences 1...10; 1...3 held, 4...10 dropped

        subscriber.request(.max(2))
        #expect(subscriber.names == ["e.1", "e.2"])
        subscriber.request(.max(1))
        bus.post("e.11")  // room again: held after the gap
        subscriber.request(.unlimited)

        #expect(subscriber.names == ["e.1", "e.2", "e.3", "bus.gap", "e.11"])
        let gap = try #require(subscriber.events[3].gap)
        #expect(gap == Gap(dropped: 7, firstSequence: 4, lastSequence: 10))
        #expect(subscriber.events[3].sequence == 0)
        #expect(subscriber.violations.isEmpty)
    }

    @Test func aGapConsumesDemandLikeAnyEvent() throws {
        let bus = Bus()
        let subscriber = RecordingSubscriber(initialDemand: .none)
        try bus.publisher(for: "e.*").bufferLimit(1).subscribe(subscriber)
        for i in 1...3 { bus.post("e.\(i)") }
        subscriber.request(.max(1))
        #expect(subscriber.names == ["e.1"])
        subscriber.request(.max(1))
        #expect(subscriber.names == ["e.1", "bus.gap"])
        #expect(subscriber.events[1].gap?.dropped == 2)
        #expect(subscriber.violations.isEmpty)
    }

    @Test func nothingArrivesAfterCancelEvenFromInsideTheSubscriber() throws {
        let bus = Bus()
        let subscriber = RecordingSubscriber()
        subscriber.onValue = { [unowned subscriber] event in
            if event.name == "e.2" { subscriber.cancel() }
            return .none
        }
        try bus.publisher(for: "e.*").subscribe(subscriber)
        for i in 1...4 { bus.post("e.\(i)") }
        #expect(subscriber.names == ["e.1", "e.2"])
        #expect(subscriber.completions == 0)
        #expect(bus.statistics.subscriptions == 0)
    }

    @Test func cancelDropsHeldEventsAndReleasesTheSubscriber() throws {
        let bus = Bus()
        weak var weakSubscriber: RecordingSubscriber?
        do {
            let subscriber = RecordingSubscriber(initialDemand: .none)
            weakSubscriber = subscriber
            try bus.publisher(for: "e.*").subscribe(subscriber)
            bus.post("e.1")
            subscriber.cancel()
            subscriber.request(.unlimited)
            #expect(subscriber.names.isEmpty)
        }
        #expect(weakSubscriber == nil)
    }

    /// A sink whose closures capture the object that keeps its cancellable (a cycle, as in real
    /// code): once it ends — cancelled, or its bus finished — that object is freed.
    @Test(arguments: [true, false]) func anEndedSinkKeepsNothingAlive(cancelled: Bool) throws {
        final class Owner { var cancellable: AnyCancellable? }
        let bus = Bus()
        weak var weakOwner: Owner?
        do {
            let owner = Owner()
            weakOwner = owner
            owner.cancellable = try bus.publisher(for: "e").sink(receiveCompletion: { _ in _ = owner }, receiveValue: { _ in _ = owner })
        }
        #expect(weakOwner != nil, "active: the bus holds the sink and so its owner")
        if cancelled { weakOwner?.cancellable?.cancel() } else { bus.finish() }
        #expect(weakOwner == nil)
    }

    @Test func finishCompletesEveryoneOnceAfterWhatIsHeld() throws {
        let bus = Bus()
        let eager = RecordingSubscriber()
        let lagging = RecordingSubscriber(initialDemand: .none)
        try bus.publisher(for: ">").subscribe(eager)
        try bus.publisher(for: ">").subscribe(lagging)
        bus.post("e.1")
        bus.finish()
        #expect(bus.post("e.after") == 0, "a finished bus says the event went nowhere")
        #expect(eager.names == ["e.1"])
        #expect(eager.completions == 1)
        #expect(lagging.completions == 0)  // still holds e.1
        lagging.request(.max(1))
        #expect(lagging.names == ["e.1"])
        #expect(lagging.completions == 1)

        let late = RecordingSubscriber()
        try bus.publisher(for: ">").subscribe(late)
        #expect(late.completions == 1)
        #expect(late.names.isEmpty)
        #expect(eager.violations.isEmpty && lagging.violations.isEmpty && late.violations.isEmpty)
    }

    @Test func reentrantPostIsDeliveredAfterTheCurrentEventReachedEveryone() throws {
        let bus = Bus()
        let order = Collected<[String]>([])
        let first = try bus.publisher(for: ">").sink { event in
            order.update { $0.append("first:\(event.name)") }
            if event.name == "a" { bus.post("b") }
        }
        let second = try bus.publisher(for: ">").sink { event in order.update { $0.append("second:\(event.name)") } }
        bus.post("a")
        #expect(order.value == ["first:a", "second:a", "first:b", "second:b"])
        withExtendedLifetime((first, second)) {}
    }

    /// Names that alternate (as a file's `fs.created`, `fs.modified`, `fs.closed` do) are routed
    /// from the loop's few most recent routes: more names than it keeps, and subscriptions that
    /// come and go between posts, still reach exactly the subscribers they match.
    @Test func alternatingNamesReachExactlyTheirSubscribersAsSubscriptionsChange() throws {
        let bus = Bus()
        let names = (0..<7).map { "alt.n\($0)" }
        var subscribers = try names.map { name in
            let subscriber = RecordingSubscriber()
            try bus.publisher(for: EventPattern(name)).subscribe(subscriber)
            return subscriber
        }
        let everything = RecordingSubscriber()
        try bus.publisher(for: "alt.*").subscribe(everything)
        var expected = Array(repeating: [UInt64](), count: names.count)
        for round in 0..<60 {
            let index = [0, 1, 2, 0, 3, 1, 4, 5, 6, 2][round % 10]
            if round == 23 {  // just before n0 again: a second subscriber for it arrives, the one for n1 leaves
                let late = RecordingSubscriber()
                try bus.publisher(for: "alt.n0").subscribe(late)
                subscribers.append(late)
                expected.append([])
                subscribers[1].cancel()
            }
            let sequence = bus.post(names[index])
            if !(round >= 23 && index == 1) { expected[index].append(sequence) }
            if round >= 23 && index == 0 { expected[7].append(sequence) }
        }
        for (index, subscriber) in subscribers.enumerated() {
            #expect(subscriber.events.map(\.sequence) == expected[index], "subscriber \(index)")
            #expect(subscriber.violations.isEmpty)
        }
        #expect(everything.events.count == 60)
    }

    @Test func subscribersAreCalledInTheOrderTheySubscribed() throws {
        let bus = Bus()
        let order = Collected<[Int]>([])
        let sinks = try (0..<50).map { i in try bus.publisher(for: "e").sink { _ in order.update { $0.append(i) } } }
        bus.post("e")
        #expect(order.value == Array(0..<50))
        withExtendedLifetime(sinks) {}
    }

    @Test func concurrentPostersReachEverySubscriberSeriallyAndInSequenceOrder() async throws {
        let bus = Bus()
        let subscribers = (0..<3).map { _ in RecordingSubscriber() }
        for subscriber in subscribers { try bus.publisher(for: "load.>").subscribe(subscriber) }
        let perThread = 5_000
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<4 {
                group.addTask { for i in 0..<perThread { bus.post("load.t\(thread)", fields: ["i": .int(Int64(i))]) } }
            }
        }
        for subscriber in subscribers {
            #expect(subscriber.events.count == 4 * perThread)
            let sequences = subscriber.events.map(\.sequence)
            #expect(sequences == sequences.sorted() && Set(sequences).count == sequences.count)
            for thread in 0..<4 {  // each poster's own order is kept
                let mine = subscriber.events.filter { $0.name == "load.t\(thread)" }.compactMap { $0["i"]?.intValue }
                #expect(mine == (0..<Int64(perThread)).map { $0 })
            }
            #expect(subscriber.violations.isEmpty)
        }
    }

    @Test func concurrentCancelAndRequestWhilePostingIsSafe() async throws {
        let bus = Bus()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { for i in 0..<20_000 { bus.post("e.\(i % 7)") } }
            for _ in 0..<4 {
                group.addTask {
                    for _ in 0..<300 {
                        let subscriber = RecordingSubscriber(initialDemand: .max(1))
                        try? bus.publisher(for: "e.*").subscribe(subscriber)
                        subscriber.request(.max(3))
                        subscriber.cancel()
                        let countAfterCancel = subscriber.events.count
                        #expect(countAfterCancel <= 4)
                        #expect(subscriber.violations.isEmpty)
                    }
                }
            }
        }
        #expect(bus.statistics.subscriptions == 0)
    }

    @Test func operatorsOfCombineComposeWithBusPublishers() throws {
        let bus = Bus()
        let got = Collected<[String]>([])
        let shared = try bus.publisher(for: "fs.*").share()
        let a = shared.filter { $0.name == "fs.created" }.map(\.name).sink { name in got.update { $0.append("a:\(name)") } }
        let b = shared.map(\.name).sink { name in got.update { $0.append("b:\(name)") } }
        bus.post("fs.created")
        bus.post("fs.deleted")
        #expect(got.value.filter { $0.hasPrefix("a:") } == ["a:fs.created"])
        #expect(got.value.filter { $0.hasPrefix("b:") } == ["b:fs.created", "b:fs.deleted"])
        #expect(bus.statistics.subscriptions == 1)  // share(): one bus subscription for both
        withExtendedLifetime((a, b)) {}
    }

    @Test func asyncSequenceBridgeDeliversInOrder() async throws {
        let bus = Bus()
        let publisher = try bus.publisher(for: "n.*")
        let reader = Task {
            var names: [String] = []
            for await event in publisher.values {
                names.append(event.name)
                if names.count == 3 { break }
            }
            return names
        }
        #expect(await eventually { bus.statistics.subscriptions == 1 })
        for i in 1...3 { bus.post("n.\(i)") }
        #expect(await reader.value == ["n.1", "n.2", "n.3"])
        #expect(await eventually { bus.statistics.subscriptions == 0 })
    }
}
