import Synchronization

/// The event bus: post events, subscribe with patterns, share sources.
///
/// ## Delivery and threads
/// Posting never takes a lock while calling subscribers. The bus runs one *delivery loop*: a
/// thread that posts while nobody is delivering becomes the loop and delivers — that event and
/// whatever other threads post meanwhile — until the queue is empty; a thread that posts while
/// the loop runs only enqueues. So:
/// - every subscriber sees events in bus sequence order and never sees concurrent calls;
/// - a post from inside a subscriber (re-entrant) is queued and delivered right after the
///   current event has reached every subscriber, not nested inside it;
/// - a subscriber that takes long delays the loop: subscribers that do real work receive through
///   a mailbox (their own serial queue), as handler modules do.
/// `request` and `cancel` from any thread are jobs on the same loop, so demand and buffers need
/// no lock of their own.
///
/// ## Demand and loss
/// A subscription gets no more than it requested. What arrives beyond its demand is buffered up
/// to ``Configuration/subscriptionBufferLimit`` events; past that, the newest are dropped and a
/// ``Gap`` notice takes their place in the stream, with the count and sequence range.
public final class Bus: Sendable {
    public struct Configuration: Sendable {
        /// Events held per subscription beyond its demand before dropping (and announcing) more.
        public var subscriptionBufferLimit: Int = 1024
        /// Distinct event names whose subscriber lists are cached.
        public var routeCacheLimit: Int = 4096

        public init() {}
    }

    /// A snapshot of the bus for status displays and tests.
    public struct Statistics: Sendable {
        public var posted: UInt64
        public var subscriptions: Int
        /// Running shared sources and how many subscriptions hold each.
        public var sources: [String: Int]
    }

    public let configuration: Configuration
    private let state: Mutex<State>
    let sources = SharedSources()

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
        self.state = Mutex(State(routeCacheLimit: configuration.routeCacheLimit))
    }

    // MARK: Posting

    /// Posts an event to every matching subscription. Assigns the event its sequence number.
    public func post(_ event: Event) {
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
        guard let targets else { return }
        deliver(event, to: targets)
        drain()
    }

    /// Posts a user event.
    public func post(_ name: String, source: String = "user", fields: [String: FieldValue] = [:]) {
        post(Event(name: name, source: source, fields: fields))
    }

    /// Completes every subscription (after what is buffered for it) and refuses new ones.
    /// Running sources are stopped as their subscribers go.
    public func finish() {
        enqueue(.finish)
    }

    // MARK: Subscribing

    /// Events whose names match `pattern`.
    public func publisher(for pattern: EventPattern) -> EventPublisher {
        EventPublisher(bus: self, patterns: [pattern], source: nil, bufferLimit: configuration.subscriptionBufferLimit)
    }

    /// Events whose names match any of `patterns` (NATS syntax, see ``EventPattern``).
    /// Throws ``EventBusError/Code/invalidPattern`` for a malformed pattern.
    public func publisher(for patterns: String...) throws -> EventPublisher {
        EventPublisher(bus: self, patterns: try patterns.map(EventPattern.init),
                       source: nil, bufferLimit: configuration.subscriptionBufferLimit)
    }

    /// Events of a shared source that match `patterns`; the source runs while any such
    /// subscription exists.
    public func publisher(for patterns: [EventPattern], from source: SourceRequest) -> EventPublisher {
        EventPublisher(bus: self, patterns: patterns, source: source, bufferLimit: configuration.subscriptionBufferLimit)
    }

    public var statistics: Statistics {
        let (posted, count) = state.withLock { ($0.posted, $0.subscriptions.count) }
        return Statistics(posted: posted, subscriptions: count, sources: sources.snapshot)
    }

    func subscribe<Downstream: Subscriber>(_ downstream: Downstream, to publisher: EventPublisher)
    where Downstream.Input == Event, Downstream.Failure == Never {
        let added = register(publisher) { id, lease in
            BusSubscription(bus: self, downstream: downstream, id: id, patterns: publisher.patterns,
                            sourceFilter: publisher.source?.id, lease: lease, bufferLimit: publisher.bufferLimit)
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
    private func register<Core: SubscriptionCore>(
        _ publisher: EventPublisher, make: (UInt64, SourceLease?) -> Core
    ) -> Core? {
        let shared = publisher.source.map { sources.acquire($0) }
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
        if let shared, shared.isFirst { shared.source.start(posting: self) }
        return subscription
    }

    func request(_ subscription: SubscriptionCore, _ demand: Int) {
        guard demand > 0 else { return }
        enqueue(.request(subscription, demand))
    }

    func cancel(_ subscription: SubscriptionCore) {
        guard !subscription.cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        enqueue(.release(subscription))
        subscription.lease?.release()
    }

    // MARK: The delivery loop

    private enum Job {
        case event(Event)
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
                subscription.release()
            case .finish(let subscriptions):
                for subscription in subscriptions {
                    subscription.finish()
                    subscription.lease?.release()
                }
            }
        }
    }
}
