import Foundation
import Synchronization

/// The engine behind every ``Bus`` handle: routing, the delivery loop, shared sources.
/// See ``Bus`` for the delivery model.
///
/// `@unchecked Sendable`: `loop` is used only by the thread that is the loop at the time
/// (see `control`); everything else is a lock or an atomic.
@usableFromInline
final class BusCore: @unchecked Sendable {
    let configuration: Bus.Configuration
    private let state: Locked<State>
    let sources = SharedSources()
    /// Drivers of source kinds, by kind (see ``SourceOptions``): timers always, the rest
    /// registered by the host.
    let drivers = Locked<[String: SourceDriver]>([TimerSchedule.kind: TimerSchedule.driver])
    /// Per kind, how to rebuild its options from their encoded form (``Bus/decodeSourceOptions(kind:from:)``).
    let optionDecoders = Locked<[String: @Sendable (Data) throws -> any SourceOptions]>([
        TimerSchedule.kind: { try JSONDecoder().decode(TimerSchedule.self, from: $0) },
    ])
    /// See ``Bus/hasHandedOut(through:)``.
    let handOutCheck = Locked<(@Sendable (UInt64) -> Bool)?>(nil)
    /// See ``Bus/handOutPatience``.
    let handOutPatience = Locked<Duration>(Bus.defaultHandOutPatience)
    /// Set in a module worker process: subscriptions, posts and acknowledgements go to the host
    /// (see ``BusRemote``), and shared sources run there, not here.
    let remote: (any BusRemote)?

    /// The delivery loop's state word: the last sequence number given out (`<< 2`), whether the
    /// bus has finished (``finishedBit``) and whether a thread is the loop (``loopingBit``).
    /// One word, so a post that finds the bus idle takes its number and the loop in one
    /// compare-and-swap, and no number is ever given out of order with the queue: a post that
    /// queues takes its number under the queue's lock, and always with the loop bit set.
    private let control = Atomic<UInt64>(0)
    private static let loopingBit: UInt64 = 1
    private static let finishedBit: UInt64 = 2
    private static let oneSequence: UInt64 = 4
    /// How many jobs wait in `state.jobs`, changed under its lock: the fast path posts directly
    /// only when none wait, so nothing a thread queued before its post is overtaken by it.
    private let queued = Atomic<Int>(0)
    /// Changes (under the lock) whenever `state.subscriptions` does: the loop's cached routes
    /// are stale when it differs from the one they were built at.
    private let subscriptionsVersion = Atomic<UInt64>(0)
    /// Owned by whichever thread is the loop (it got there through `control`, which orders one
    /// loop's writes before the next one's reads). A pointer, not a class's `var`s, so using it
    /// costs no run-time exclusivity check.
    private let loop: UnsafeMutablePointer<Loop>

    init(configuration: Bus.Configuration, remote: (any BusRemote)? = nil) {
        self.configuration = configuration
        self.remote = remote
        self.state = Locked(State())
        self.loop = .allocate(capacity: 1)
        loop.initialize(to: Loop(routeCacheLimit: configuration.routeCacheLimit))
    }

    deinit {
        loop.pointee.lastTargetsStorage.deallocate()
        loop.deinitialize(count: 1)
        loop.deallocate()
    }

    // MARK: Posting

    func post(_ event: consuming Event) -> UInt64 {
        if let remote {
            // The host numbers it; a worker cannot know the number without a round trip.
            remote.post(event)
            return 0
        }
        // The fast path: nobody is delivering and nothing waits, so this thread becomes the loop
        // and delivers at once — the event never enters the queue.
        var word = control.load(ordering: .relaxed)
        while word & (Self.loopingBit | Self.finishedBit) == 0, queued.load(ordering: .sequentiallyConsistent) == 0 {
            let taken = (word &+ Self.oneSequence) | Self.loopingBit
            let (exchanged, seen) = control.compareExchange(
                expected: word, desired: taken, ordering: .sequentiallyConsistent)
            if exchanged {
                event.sequence = taken >> 2
                deliver(event)
                leaveLoop(after: taken)
                return event.sequence
            }
            word = seen
        }
        return withUnsafePointer(to: event) { enqueue(UnsafeBufferPointer(start: $0, count: 1)).last ?? 0 }
    }

    /// Posts `events` in order, with contiguous sequence numbers; returns them (empty: the bus
    /// has finished, or this is a module worker's bus). One compare-and-swap — or one lock — for
    /// the whole batch, and when the bus is idle the events go straight from `events` to the
    /// subscribers, in one run of the loop.
    @usableFromInline
    func post(contentsOf events: UnsafeBufferPointer<Event>) -> Range<UInt64> {
        if let remote {
            for event in events { remote.post(event) }
            return 0..<0
        }
        let count = UInt64(events.count)
        guard count > 0 else { return 0..<0 }
        var word = control.load(ordering: .relaxed)
        while word & (Self.loopingBit | Self.finishedBit) == 0, queued.load(ordering: .sequentiallyConsistent) == 0 {
            let taken = (word &+ count &* Self.oneSequence) | Self.loopingBit
            let (exchanged, seen) = control.compareExchange(
                expected: word, desired: taken, ordering: .sequentiallyConsistent)
            if exchanged {
                let first = (word >> 2) &+ 1
                deliverNumbered(events, from: first)
                leaveLoop(after: taken)
                return first..<(first &+ count)
            }
            word = seen
        }
        return enqueue(events)
    }

    func finish() {
        enqueue(.finish)
    }

    // MARK: Subscribing

    var statistics: Bus.Statistics {
        let count = state.withLock { $0.subscriptions.count }
        let posted = control.load(ordering: .relaxed) >> 2
        return Bus.Statistics(posted: posted, subscriptions: count, sources: sources.snapshot)
    }

    func subscribe<Downstream: Subscriber>(_ downstream: Downstream, to publisher: EventPublisher)
    where Downstream.Input == Event, Downstream.Failure == Never {
        let added = register(publisher, make: { id, lease in
            BusSubscription(core: self, downstream: downstream, id: id, publisher: publisher, lease: lease)
        }, beforeSourceStarts: { downstream.receive(subscription: $0) })
        guard added != nil else {
            downstream.receive(subscription: Subscriptions.empty)
            downstream.receive(completion: .finished)
            return
        }
    }

    func sink(_ publisher: EventPublisher,
              receiveCompletion: @escaping (Subscribers.Completion<Never>) -> Void,
              receiveValue: @escaping (Event) -> Void) -> AnyCancellable {
        let added = register(publisher, make: { id, lease in
            ClosureSubscription(id: id, publisher: publisher, lease: lease,
                                receiveCompletion: receiveCompletion, receiveValue: receiveValue)
        }, beforeSourceStarts: { self.request($0, Int.max) })
        guard let added else {
            receiveCompletion(.finished)
            return AnyCancellable {}
        }
        // Through the handle, which lets go when the subscription ends: a cancellable kept after
        // cancel or completion does not keep the closures (and what they capture) alive.
        return AnyCancellable { [weak self, handle = added.handle] in
            if let subscription = handle.take() { self?.cancel(subscription) }
        }
    }

    /// Adds a subscription to the routing table, hands it to `beforeSourceStarts` (where its
    /// subscriber asks for its first demand), then starts its shared source if it is the first
    /// one, or tells the running one that a subscriber joined. In that order, so the source's
    /// first events reach it, and its demand is queued before them: a source that posts a burst
    /// at once (a journal's backlog) would otherwise fill the subscription's buffer before the
    /// demand arrives — and past its limit drop events.
    ///
    /// A joiner of a source that greets its joiners awaits its greeting from the moment it is
    /// routed (``SubscriptionCore/awaitingGreeting``): whatever the moment it joins — before
    /// the source's first snapshot is posted, while it is delivered, after — it takes no
    /// snapshot but its own.
    /// Nil when the bus has finished (then `beforeSourceStarts` is not called).
    func register<Core: SubscriptionCore>(
        _ publisher: EventPublisher, make: (UInt64, SourceLease?) -> Core,
        beforeSourceStarts: (Core) -> Void
    ) -> Core? {
        // In a worker the host runs the source: nothing to acquire here.
        let shared = remote == nil ? publisher.source.map { sources.acquire($0) } : nil
        let greeter = shared.flatMap { $0.isFirst ? nil : $0.source as? any GreetsJoiningSubscribers }
        let subscription: Core? = state.withLock { state in
            guard !state.finished else { return nil }
            state.lastSubscriptionID += 1
            let subscription = make(state.lastSubscriptionID, shared?.lease)
            subscription.awaitingGreeting = greeter != nil
            state.subscriptions[subscription.id] = subscription
            subscriptionsVersion.wrappingAdd(1, ordering: .releasing)
            return subscription
        }
        guard let subscription else {
            shared?.lease.release()
            return nil
        }
        remote?.subscribe(subscription.id, patterns: publisher.patterns, source: publisher.source)
        beforeSourceStarts(subscription)
        if let shared, shared.isFirst {
            sources.start(shared.source, id: shared.lease.id, posting: Bus(core: self, mailbox: nil))
        } else if let greeter {
            greeter.subscriberJoined(SubscriberGreeting(core: self, subscription: subscription))
        }
        return subscription
    }

    /// Posts `events` to `subscription` only; `completing` ends its greeting after them (see
    /// ``SubscriberGreeting``).
    func post(_ events: [Event], onlyTo subscription: SubscriptionCore, completing: Bool) -> Range<UInt64> {
        guard remote == nil else { return 0..<0 }
        // Greeting jobs skip routing: what its patterns do not take is left out here. The
        // greeting ends even when none of it is taken.
        let matching = events.filter { subscription.matches(name: $0.name) }
        guard !matching.isEmpty || completing else { return 0..<0 }
        return matching.withUnsafeBufferPointer { enqueue($0, onlyTo: subscription, completing: completing) }
    }

    func request(_ subscription: SubscriptionCore, _ demand: Int) {
        guard demand > 0 else { return }
        if let mailbox = subscription.mailbox {
            mailbox.submit(.request(subscription, demand))
        } else {
            enqueue(.request(subscription, demand))
        }
    }

    func cancel(_ subscription: SubscriptionCore) {
        guard !subscription.cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        enqueue(.release(subscription))
        subscription.lease?.release()
        remote?.cancel(subscription.id)
    }

    func deliverRemote(_ batch: [(subscription: UInt64, event: Event)]) {
        guard !batch.isEmpty else { return }
        // The fast path, for subscriptions with a mailbox (every subscription a worker's module
        // makes through its context): straight to the mailbox, one lock for the look-up and one
        // for the mailbox per batch. Retained here, so a cancel meanwhile cannot free one; a
        // cancelled one drops what arrives, as on the delivery loop.
        let targets: [SubscriptionCore?] = state.withLock { state in batch.map { state.subscriptions[$0.subscription] } }
        if let mailbox = targets.lazy.compactMap({ $0 }).first?.mailbox,
           targets.allSatisfy({ $0 == nil || $0!.mailbox === mailbox }) {
            var run: [(SubscriptionCore, Event)] = []
            run.reserveCapacity(batch.count)
            for (index, item) in batch.enumerated() {
                guard let target = targets[index], !target.cancelled.load(ordering: .relaxed) else { continue }
                if let filter = target.sourceFilter, item.event.source != filter { continue }
                run.append((target, item.event))
            }
            mailbox.submit(run)
            return
        }
        enqueue { state in
            for item in batch {
                // Retained by the job: a cancel before it runs is seen by `deliver`.
                if let target = state.subscriptions[item.subscription] { state.jobs.append(.direct(target, item.event)) }
            }
        }
    }

    // MARK: The delivery loop

    private enum Job {
        /// A posted event, numbered.
        case event(Event)
        /// An event the host routed to one subscription of this (worker) process.
        case direct(SubscriptionCore, Event)
        /// An event of a subscription's greeting: to it alone, past ``SubscriptionCore/awaitingGreeting``.
        case greeting(SubscriptionCore, Event)
        /// The subscription's greeting is complete: its source's events reach it from here on.
        case greeted(SubscriptionCore)
        case request(SubscriptionCore, Int)
        case release(SubscriptionCore)
        case finish
    }

    private typealias Route = [Unmanaged<SubscriptionCore>]

    /// Guarded by the lock.
    private struct State {
        var lastSubscriptionID: UInt64 = 0
        var jobs = RingBuffer<Job>()
        var finished = false
        var subscriptions: [UInt64: SubscriptionCore] = [:]
    }

    /// The loop's own state: its route cache and the jobs it is working through.
    private struct Loop {
        let routeCacheLimit: Int
        /// The `subscriptionsVersion` the cached routes were built at.
        var version: UInt64 = .max
        var routes: [String: Route] = [:]
        /// The last few routes looked up, by name, overwritten in turn: most traffic alternates
        /// between a few names (a file's `fs.created`, `fs.modified`, `fs.closed`), and comparing
        /// a short name with a handful costs less than hashing it for `routes`. Only valid at
        /// `version`, like `routes`.
        var recent: [(name: String, route: Route)] = []
        var nextRecent = 0
        static let recentLimit = 4
        /// The last route used: most traffic is runs of one event name. (Only valid at `version`,
        /// which starts out matching nothing.)
        var lastName = ""
        /// That route's subscriptions, copied into storage the loop keeps (grown, never shrunk):
        /// iterating a `Route` array held here would retain and release its buffer on every
        /// post — two atomic operations, a tenth of a post's instructions.
        var lastTargets = UnsafeMutableBufferPointer<Unmanaged<SubscriptionCore>>(start: nil, count: 0)
        var lastTargetsStorage = UnsafeMutableBufferPointer<Unmanaged<SubscriptionCore>>(start: nil, count: 0)
        /// Jobs taken from the queue under one lock, run in order.
        var taken: [Job] = []

        init(routeCacheLimit: Int) { self.routeCacheLimit = routeCacheLimit }

        mutating func remember(_ name: String, _ route: Route) {
            if recent.count < Self.recentLimit {
                recent.append((name, route))
            } else {
                recent[nextRecent] = (name, route)
                nextRecent = (nextRecent + 1) % Self.recentLimit
            }
        }
    }

    /// Queues `events` after everything queued so far, numbering them under the queue's lock;
    /// the caller becomes the loop if none runs. Returns their sequence numbers (empty: finished).
    /// Numbers `events` and queues them, for every matching subscription — or, with `target`,
    /// for that one alone (``SubscriberGreeting``), ending its greeting after them when
    /// `completing`: in sequence order with every other post.
    private func enqueue(_ events: UnsafeBufferPointer<Event>, onlyTo target: SubscriptionCore? = nil,
                         completing: Bool = false) -> Range<UInt64> {
        let count = UInt64(events.count)
        var numbers: Range<UInt64> = 0..<0
        let becameLoop = state.withLock { state -> Bool in
            var word = control.load(ordering: .sequentiallyConsistent)
            while true {
                if word & Self.finishedBit != 0 { return false }
                let (exchanged, seen) = control.compareExchange(
                    expected: word, desired: (word &+ count &* Self.oneSequence) | Self.loopingBit,
                    ordering: .sequentiallyConsistent)
                if exchanged { break }
                word = seen
            }
            var sequence = (word >> 2) &+ 1
            numbers = sequence..<(sequence &+ count)
            for index in events.indices {
                var event = events[index]
                event.sequence = sequence
                sequence &+= 1
                state.jobs.append(target.map { .greeting($0, event) } ?? .event(event))
            }
            var jobs = events.count
            if completing, let target {
                state.jobs.append(.greeted(target))
                jobs += 1
            }
            queued.wrappingAdd(jobs, ordering: .sequentiallyConsistent)
            return word & Self.loopingBit == 0
        }
        if becameLoop { drain() }
        return numbers
    }

    private func enqueue(_ job: Job) {
        enqueue { $0.jobs.append(job) }
    }

    /// Appends jobs under the lock; the caller becomes the loop if none runs.
    private func enqueue(_ append: (inout State) -> Void) {
        let becameLoop = state.withLock { state -> Bool in
            let before = state.jobs.count
            append(&state)
            queued.wrappingAdd(state.jobs.count - before, ordering: .sequentiallyConsistent)
            var word = control.load(ordering: .sequentiallyConsistent)
            while word & Self.loopingBit == 0 {
                let (exchanged, seen) = control.compareExchange(
                    expected: word, desired: word | Self.loopingBit, ordering: .sequentiallyConsistent)
                if exchanged { return true }
                word = seen
            }
            return false
        }
        if becameLoop { drain() }
    }

    /// Ends a fast-path delivery: lets go of the loop if nobody queued anything meanwhile,
    /// otherwise works through the queue.
    private func leaveLoop(after taken: UInt64) {
        // A post that came meanwhile took the next number (the word changed): it is queued.
        let (released, _) = control.compareExchange(
            expected: taken, desired: taken & ~Self.loopingBit, ordering: .sequentiallyConsistent)
        guard released else { return drain() }
        // A request, cancel or finish queued meanwhile saw the loop running and left its job to
        // it. (Both sides write, then read the other's word: one of them sees the other.)
        guard queued.load(ordering: .sequentiallyConsistent) > 0 else { return }
        var word = control.load(ordering: .sequentiallyConsistent)
        while word & Self.loopingBit == 0 {
            let (exchanged, seen) = control.compareExchange(
                expected: word, desired: word | Self.loopingBit, ordering: .sequentiallyConsistent)
            if exchanged { return drain() }
            word = seen
        }
    }

    /// The hot path: no lock, no retain. Routes hold subscriptions unretained; that is safe
    /// because only the delivery loop removes a subscription from `subscriptions` (which owns
    /// them), and the loop is where this runs.
    @inline(__always)
    private func deliver(_ event: Event) {
        route(event.name)
        for target in loop.pointee.lastTargets {
            target._withUnsafeGuaranteedRef { $0.deliver(event) }
        }
    }

    /// Delivers the caller's `events`, numbered from `first` (without copying one: see
    /// ``forEachNumbered``). Events that reach one subscription go to it in runs — one call for
    /// as many as keep reaching it alone — so a batch costs little more per event than a delivery.
    @inline(__always)
    private func deliverNumbered(_ events: UnsafeBufferPointer<Event>, from first: UInt64) {
        var index = 0
        while index < events.count {
            // One by one while they reach several subscriptions, or none.
            index += forEachNumbered(UnsafeBufferPointer(rebasing: events[index...]), from: first &+ UInt64(index)) { event in
                route(event.name)
                guard loop.pointee.lastTargets.count != 1 else { return false }
                for target in loop.pointee.lastTargets {
                    target._withUnsafeGuaranteedRef { $0.deliver(event) }
                }
                return true
            }
            guard index < events.count else { return }
            // The next one reaches a single subscription, and its route is current.
            let rest = UnsafeBufferPointer(rebasing: events[index...])
            let sequence = first &+ UInt64(index)
            let target = loop.pointee.lastTargets[0]
            var taken = target._withUnsafeGuaranteedRef { $0.deliverRun(rest, numberedFrom: sequence, routedBy: self) }
            if taken == 0 {  // it takes no run now (held events, bounded demand)
                taken = forEachNumbered(UnsafeBufferPointer(rebasing: rest.prefix(1)), from: sequence) { event in
                    target._withUnsafeGuaranteedRef { $0.deliver(event) }
                    return true
                }
            }
            index += taken
        }
    }

    /// Whether `route(name)` would change nothing: routes are as they were when it ran last, and
    /// for this name. Only on the loop (a subscription's run asks it between events).
    @inline(__always)
    func routeIsCurrent(for name: String) -> Bool {
        subscriptionsVersion.load(ordering: .acquiring) == loop.pointee.version && loop.pointee.lastName == name
    }

    /// Makes `loop.lastTargets` the subscriptions `name` reaches.
    @inline(__always)
    private func route(_ name: String) {
        if routeIsCurrent(for: name) { return }
        lookUpRoute(name, version: subscriptionsVersion.load(ordering: .acquiring))
    }

    private func lookUpRoute(_ name: String, version: UInt64) {
        if version != loop.pointee.version {
            loop.pointee.routes.removeAll(keepingCapacity: true)
            loop.pointee.recent.removeAll(keepingCapacity: true)
            loop.pointee.version = version
        }
        let targets: Route
        if let recent = loop.pointee.recent.first(where: { $0.name == name }) {
            targets = recent.route
        } else if let cached = loop.pointee.routes[name] {
            targets = cached
            loop.pointee.remember(name, cached)
        } else {
            targets = state.withLock { state in
                state.subscriptions.values.filter { $0.matches(name: name) }.sorted { $0.id < $1.id }
                    .map(Unmanaged.passUnretained)
            }
            if loop.pointee.routes.count >= loop.pointee.routeCacheLimit {
                loop.pointee.routes.removeAll(keepingCapacity: true)
            }
            loop.pointee.routes[name] = targets
            loop.pointee.remember(name, targets)
        }
        loop.pointee.lastName = name
        if targets.count > loop.pointee.lastTargetsStorage.count {
            loop.pointee.lastTargetsStorage.deallocate()
            loop.pointee.lastTargetsStorage = .allocate(capacity: max(targets.count, 2 * loop.pointee.lastTargetsStorage.count))
        }
        let (_, copied) = loop.pointee.lastTargetsStorage.initialize(from: targets)
        loop.pointee.lastTargets = UnsafeMutableBufferPointer(rebasing: loop.pointee.lastTargetsStorage[..<copied])
    }

    /// Runs the queue until it is empty, then lets go of the loop (under the lock, so a job
    /// queued after that finds no loop and starts one). Called only by the thread that is the loop.
    private func drain() {
        var taken: [Job] = []
        swap(&taken, &loop.pointee.taken)  // its storage, kept from one drain to the next
        while true {
            let more = state.withLock { state -> Bool in
                while taken.count < Self.jobsPerLock, let job = state.jobs.popFirst() { taken.append(job) }
                if taken.isEmpty {
                    swap(&taken, &loop.pointee.taken)  // before letting go: the next loop uses it
                    control.wrappingSubtract(Self.loopingBit, ordering: .sequentiallyConsistent)
                    return false
                }
                queued.wrappingSubtract(taken.count, ordering: .sequentiallyConsistent)
                return true
            }
            guard more else { return }
            for job in taken { run(job) }
            taken.removeAll(keepingCapacity: true)
        }
    }

    /// Jobs the loop takes from the queue per lock.
    private static let jobsPerLock = 256

    private func run(_ job: Job) {
        switch job {
        case .event(let event):
            deliver(event)
        case .direct(let subscription, let event):
            subscription.deliver(event)
        case .greeting(let subscription, let event):
            subscription.deliverGreeting(event)
        case .greeted(let subscription):
            subscription.awaitingGreeting = false
        case .request(let subscription, let demand):
            subscription.addDemand(demand)
        case .release(let subscription):
            state.withLock { state in
                state.subscriptions[subscription.id] = nil
                subscriptionsVersion.wrappingAdd(1, ordering: .releasing)
            }
            if let mailbox = subscription.mailbox {
                mailbox.submit(.release(subscription))
            } else {
                subscription.release()
            }
        case .finish:
            let subscriptions = state.withLock { state in
                state.finished = true
                control.bitwiseOr(Self.finishedBit, ordering: .sequentiallyConsistent)
                let all = state.subscriptions.values.sorted { $0.id < $1.id }
                state.subscriptions.removeAll()
                subscriptionsVersion.wrappingAdd(1, ordering: .releasing)
                return all
            }
            for subscription in subscriptions {
                remote?.cancel(subscription.id)
                if let mailbox = subscription.mailbox {
                    mailbox.submit(.finish(subscription))
                } else {
                    subscription.finish()
                }
                subscription.lease?.release()
            }
        }
    }
}
