
/// The engine behind every ``Bus`` handle: routing, the delivery loop, shared sources.
/// See ``Bus`` for the delivery model.
final class BusCore: Sendable {
    let configuration: Bus.Configuration
    private let state: Locked<State>
    let sources = SharedSources()
    /// Drivers of source kinds, by kind (see ``SourceOptions``): timers always, the rest
    /// registered by the host.
    let drivers = Locked<[String: SourceDriver]>([TimerSchedule.kind: TimerSchedule.driver])
    /// Set in a module worker process: subscriptions, posts and acknowledgements go to the host
    /// (see ``BusRemote``), and shared sources run there, not here.
    let remote: (any BusRemote)?

    init(configuration: Bus.Configuration, remote: (any BusRemote)? = nil) {
        self.configuration = configuration
        self.remote = remote
        self.state = Locked(State(routeCacheLimit: configuration.routeCacheLimit))
    }

    // MARK: Posting

    func post(_ event: Event) -> UInt64 {
        if let remote {
            // The host numbers it; a worker cannot know the number without a round trip.
            remote.post(event)
            return 0
        }
        var event = event
        let targets: Route? = state.withLock { state in
            guard !state.finished else { return nil }
            state.posted &+= 1
            event.sequence = state.posted
            if state.draining {
                state.jobs.append(.event(event))
                return nil
            }
            state.draining = true
            return state.route(event.name)
        }
        if let targets {
            deliver(event, to: targets)
            drain()
        }
        return event.sequence
    }

    func finish() {
        enqueue(.finish)
    }

    // MARK: Subscribing

    var statistics: Bus.Statistics {
        let (posted, count) = state.withLock { ($0.posted, $0.subscriptions.count) }
        return Bus.Statistics(posted: posted, subscriptions: count, sources: sources.snapshot)
    }

    func subscribe<Downstream: Subscriber>(_ downstream: Downstream, to publisher: EventPublisher)
    where Downstream.Input == Event, Downstream.Failure == Never {
        let added = register(publisher) { id, lease in
            BusSubscription(core: self, downstream: downstream, id: id, publisher: publisher, lease: lease)
        }
        guard let added else {
            downstream.receive(subscription: Subscriptions.empty)
            downstream.receive(completion: .finished)
            return
        }
        downstream.receive(subscription: added)
    }

    func sink(_ publisher: EventPublisher,
              receiveCompletion: @escaping (Subscribers.Completion<Never>) -> Void,
              receiveValue: @escaping (Event) -> Void) -> AnyCancellable {
        let added = register(publisher) { id, lease in
            ClosureSubscription(id: id, publisher: publisher, lease: lease,
                                receiveCompletion: receiveCompletion, receiveValue: receiveValue)
        }
        guard let added else {
            receiveCompletion(.finished)
            return AnyCancellable {}
        }
        request(added, Int.max)
        // Weak, so a cancellable kept after cancel or completion does not keep the closures (and
        // what they capture) alive; the bus holds the subscription while it is active.
        return AnyCancellable { [weak self, weak added] in
            if let self, let added { self.cancel(added) }
        }
    }

    /// Adds a subscription to the routing table, then starts its shared source if it is the first
    /// one (after, so the source's first events reach it). Nil when the bus has finished.
    func register<Core: SubscriptionCore>(
        _ publisher: EventPublisher, make: (UInt64, SourceLease?) -> Core
    ) -> Core? {
        // In a worker the host runs the source: nothing to acquire here.
        let shared = remote == nil ? publisher.source.map { sources.acquire($0) } : nil
        let subscription: Core? = state.withLock { state in
            guard !state.finished else { return nil }
            state.lastSubscriptionID += 1
            let subscription = make(state.lastSubscriptionID, shared?.lease)
            state.add(subscription)
            return subscription
        }
        guard let subscription else {
            shared?.lease.release()
            return nil
        }
        remote?.subscribe(subscription.id, patterns: publisher.patterns, source: publisher.source)
        if let shared, shared.isFirst { shared.source.start(posting: Bus(core: self, mailbox: nil)) }
        return subscription
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
        let becameLoop = state.withLock { state -> Bool in
            for item in batch { state.jobs.append(.direct(item.subscription, item.event)) }
            if state.draining { return false }
            state.draining = true
            return true
        }
        if becameLoop { drain() }
    }

    // MARK: The delivery loop

    private enum Job {
        case event(Event)
        /// An event the host routed to one subscription of this (worker) process.
        case direct(UInt64, Event)
        case request(SubscriptionCore, Int)
        case release(SubscriptionCore)
        case finish
    }

    private enum Step {
        case deliver(Event, Route)
        case request(SubscriptionCore, Int)
        case release(SubscriptionCore)
        case finish([SubscriptionCore])
    }

    private typealias Route = [Unmanaged<SubscriptionCore>]

    private struct State {
        let routeCacheLimit: Int
        var posted: UInt64 = 0
        var lastSubscriptionID: UInt64 = 0
        var jobs = RingBuffer<Job>()
        var draining = false
        var finished = false
        var subscriptions: [UInt64: SubscriptionCore] = [:]
        var routes: [String: Route] = [:]

        init(routeCacheLimit: Int) { self.routeCacheLimit = routeCacheLimit }

        /// The last route looked up: most traffic is runs of one event name.
        var lastRoute: (name: String, targets: Route)?

        mutating func route(_ name: String) -> Route {
            if let lastRoute, lastRoute.name == name { return lastRoute.targets }
            let targets = lookUpRoute(name)
            lastRoute = (name, targets)
            return targets
        }

        private mutating func lookUpRoute(_ name: String) -> Route {
            if let cached = routes[name] { return cached }
            let matching = subscriptions.values.filter { $0.matches(name: name) }.sorted { $0.id < $1.id }
                .map(Unmanaged.passUnretained)
            if routes.count >= routeCacheLimit { routes.removeAll(keepingCapacity: true) }
            routes[name] = matching
            return matching
        }

        mutating func add(_ subscription: SubscriptionCore) {
            subscriptions[subscription.id] = subscription
            invalidateRoutes()
        }

        mutating func remove(_ subscription: SubscriptionCore) {
            subscriptions[subscription.id] = nil
            invalidateRoutes()
        }

        mutating func invalidateRoutes() {
            routes.removeAll(keepingCapacity: true)
            lastRoute = nil
        }

        /// The next thing the loop must do, or nil (and the loop ends) when the queue is empty.
        mutating func nextStep() -> Step? {
            guard let job = jobs.popFirst() else {
                draining = false
                return nil
            }
            switch job {
            case .event(let event): return .deliver(event, route(event.name))
            case .direct(let id, let event):
                return .deliver(event, subscriptions[id].map { [Unmanaged.passUnretained($0)] } ?? [])
            case .request(let subscription, let demand): return .request(subscription, demand)
            case .release(let subscription):
                remove(subscription)
                return .release(subscription)
            case .finish:
                finished = true
                let all = subscriptions.values.sorted { $0.id < $1.id }
                subscriptions.removeAll()
                invalidateRoutes()
                return .finish(all)
            }
        }
    }

    private func enqueue(_ job: Job) {
        let becameLoop = state.withLock { state -> Bool in
            state.jobs.append(job)
            if state.draining { return false }
            state.draining = true
            return true
        }
        if becameLoop { drain() }
    }

    /// The hot path: no lock, no retain. Routes hold subscriptions unretained; that is safe
    /// because only the delivery loop removes a subscription from `subscriptions` (which owns
    /// them), and the loop is where this runs.
    @inline(__always)
    private func deliver(_ event: Event, to targets: Route) {
        for target in targets {
            target._withUnsafeGuaranteedRef { $0.deliver(event) }
        }
    }

    private func drain() {
        while let step = state.withLock({ $0.nextStep() }) {
            switch step {
            case .deliver(let event, let targets):
                deliver(event, to: targets)
            case .request(let subscription, let demand):
                subscription.addDemand(demand)
            case .release(let subscription):
                if let mailbox = subscription.mailbox {
                    mailbox.submit(.release(subscription))
                } else {
                    subscription.release()
                }
            case .finish(let subscriptions):
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
}
