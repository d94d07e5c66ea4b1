/// What a settled event stands for: the burst of events for one key that it replaces.
public struct SettledBurst: Sendable, Hashable {
    /// How many events the burst had (1: the event was alone).
    public var count: Int
    /// Their distinct names, in first-seen order: `["fs.created", "fs.modified", "fs.closed"]`.
    public var eventNames: [String]

    public init(count: Int, eventNames: [String]) {
        self.count = count
        self.eventNames = eventNames
    }
}

extension Event {
    /// Set on the events that ``OpenCombine/Publisher/settle(for:scheduler:options:key:)`` emits.
    public var settledBurst: SettledBurst? {
        guard let count = fields["settled_count"]?.intValue,
              let names = fields["settled_events"]?.stringValue else { return nil }
        return SettledBurst(count: Int(count), eventNames: names.split(separator: " ").map(String.init))
    }
}

extension Publisher where Output == Event {
    /// Combine's `debounce`, per key: a burst of events for one key (by default, a file change's
    /// path) becomes one event, emitted once that key has been quiet for `quietPeriod` — like
    /// watchman's settle. The emitted event is the burst's last one, with ``Event/settledBurst``
    /// saying how many it stands for and which kinds it saw (so `created` then `closed` arrives
    /// as one `fs.closed` whose burst names `fs.created`).
    ///
    /// Events without a key (for files: notices such as `fs.overflow` and `fs.error`) are not
    /// held: they go out at once, ahead of bursts still settling.
    ///
    /// Unlike `debounce`, nothing is dropped: a burst that settles while the subscriber has no
    /// demand waits for demand (merged with later bursts of its key, so at most one per key waits),
    /// and bursts still settling when the upstream completes are emitted before the completion.
    ///
    /// Threads: everything downstream receives — values and completion — arrives on `scheduler`,
    /// which must be serial (a serial `DispatchQueue`, a run loop, a test scheduler).
    public func settle<Context: Scheduler>(
        for quietPeriod: Context.SchedulerTimeType.Stride,
        scheduler: Context,
        options: Context.SchedulerOptions? = nil,
        key: @escaping (Event) -> String? = { event in
            event.fileChange.flatMap { $0.kind.isPathChange ? $0.path : nil }
        }
    ) -> Publishers.Settle<Self, Context> {
        Publishers.Settle(upstream: self, quietPeriod: quietPeriod, scheduler: scheduler,
                          options: options, key: key)
    }
}

extension Publishers {
    /// See ``OpenCombine/Publisher/settle(for:scheduler:options:key:)``.
    public struct Settle<Upstream: Publisher, Context: Scheduler>: Publisher where Upstream.Output == Event {
        public typealias Output = Event
        public typealias Failure = Upstream.Failure

        public let upstream: Upstream
        public let quietPeriod: Context.SchedulerTimeType.Stride
        public let scheduler: Context
        public let options: Context.SchedulerOptions?
        let key: (Event) -> String?

        public func receive<Downstream: Subscriber>(subscriber: Downstream)
        where Downstream.Input == Event, Downstream.Failure == Failure {
            upstream.subscribe(SettleInner(downstream: subscriber, quietPeriod: quietPeriod,
                                           scheduler: scheduler, options: options, key: key))
        }
    }
}

/// The subscription behind `settle`: subscriber to the upstream, subscription to the downstream.
///
/// Concurrency: upstream values, `request` and `cancel` may come from any thread; they only change
/// state under `lock` and schedule work. Everything that calls downstream runs on the scheduler
/// (a settle deadline, or a drain after new demand or a key-less event), never under the lock.
private final class SettleInner<Downstream: Subscriber, Context: Scheduler>: Subscriber, Subscription,
    CustomStringConvertible, @unchecked Sendable where Downstream.Input == Event
{
    typealias Input = Event
    typealias Failure = Downstream.Failure

    private struct Burst {
        var event: Event
        var generation: UInt64
        var count: Int
        var names: [String]

        mutating func absorb(_ later: Burst) {
            event = later.event
            generation = later.generation
            count += later.count
            for name in later.names where !names.contains(name) { names.append(name) }
        }

        var settledEvent: Event {
            var event = self.event
            event.fields["settled_count"] = .int(Int64(count))
            event.fields["settled_events"] = .string(names.joined(separator: " "))
            return event
        }
    }

    private enum ReadyItem {
        case keyed(String)
        case plain(Event)
    }

    private let downstream: Downstream
    private let quietPeriod: Context.SchedulerTimeType.Stride
    private let scheduler: Context
    private let options: Context.SchedulerOptions?
    private let key: (Event) -> String?
    private let lock = OperatorLock()

    // Guarded by `lock`.
    private var upstream: Subscription?
    private var terminated = false
    private var pending: [String: Burst] = [:]
    private var ready = FIFO<ReadyItem>()
    private var readyBursts: [String: Burst] = [:]
    private var demand = Subscribers.Demand.none
    private var completion: Subscribers.Completion<Failure>?
    private var lastGeneration: UInt64 = 0

    init(downstream: Downstream, quietPeriod: Context.SchedulerTimeType.Stride, scheduler: Context,
         options: Context.SchedulerOptions?, key: @escaping (Event) -> String?) {
        self.downstream = downstream
        self.quietPeriod = quietPeriod
        self.scheduler = scheduler
        self.options = options
        self.key = key
    }

    var description: String { "Settle" }

    // MARK: Upstream side

    func receive(subscription: Subscription) {
        lock.lock()
        guard upstream == nil, !terminated else {
            lock.unlock()
            subscription.cancel()
            return
        }
        upstream = subscription
        lock.unlock()
        downstream.receive(subscription: self)
        subscription.request(.unlimited)
    }

    func receive(_ input: Event) -> Subscribers.Demand {
        guard let key = key(input) else {
            lock.lock()
            if !terminated { ready.append(.plain(input)) }
            lock.unlock()
            scheduleDrain()
            return .none
        }
        lock.lock()
        guard !terminated else {
            lock.unlock()
            return .none
        }
        lastGeneration += 1
        let generation = lastGeneration
        let burst = Burst(event: input, generation: generation, count: 1, names: [input.name])
        if pending[key] != nil { pending[key]!.absorb(burst) } else { pending[key] = burst }
        lock.unlock()
        scheduler.schedule(after: scheduler.now.advanced(by: quietPeriod), tolerance: scheduler.minimumTolerance,
                           options: options) { self.settle(key, generation: generation) }
        return .none
    }

    func receive(completion: Subscribers.Completion<Failure>) {
        lock.lock()
        guard !terminated, self.completion == nil else {
            lock.unlock()
            return
        }
        upstream = nil
        // Nothing still settling is dropped: emit it now, oldest burst first.
        for (key, burst) in pending.sorted(by: { $0.value.generation < $1.value.generation }) {
            makeReady(key, burst)
        }
        pending.removeAll()
        self.completion = completion
        lock.unlock()
        scheduleDrain()
    }

    // MARK: Downstream side

    func request(_ demand: Subscribers.Demand) {
        guard demand > .none else { return }
        lock.lock()
        self.demand += demand
        lock.unlock()
        scheduleDrain()
    }

    func cancel() {
        lock.lock()
        terminated = true
        let upstream = self.upstream
        self.upstream = nil
        pending.removeAll()
        ready.removeAll()
        readyBursts.removeAll()
        lock.unlock()
        upstream?.cancel()
    }

    // MARK: On the scheduler

    /// A key's deadline passed: if nothing newer arrived for it meanwhile, its burst is ready.
    private func settle(_ key: String, generation: UInt64) {
        lock.lock()
        guard !terminated, let burst = pending[key], burst.generation == generation else {
            lock.unlock()
            return
        }
        pending[key] = nil
        makeReady(key, burst)
        lock.unlock()
        drain()
    }

    private func scheduleDrain() {
        scheduler.schedule(options: options) { self.drain() }
    }

    /// Sends ready events while there is demand, then the completion once everything is out.
    private func drain() {
        lock.lock()
        while !terminated {
            if demand > .none, let event = popReady() {
                demand -= 1
                lock.unlock()
                let more = downstream.receive(event)
                lock.lock()
                demand += more
                continue
            }
            if ready.isEmpty, let completion {
                terminated = true
                lock.unlock()
                downstream.receive(completion: completion)
                return
            }
            break
        }
        lock.unlock()
    }

    // MARK: Under the lock

    private func makeReady(_ key: String, _ burst: Burst) {
        if readyBursts[key] != nil {
            readyBursts[key]!.absorb(burst)  // keeps its place in line: one waiting burst per key
        } else {
            readyBursts[key] = burst
            ready.append(.keyed(key))
        }
    }

    private func popReady() -> Event? {
        switch ready.popFirst() {
        case .plain(let event): return event
        case .keyed(let key): return readyBursts.removeValue(forKey: key)?.settledEvent
        case nil: return nil
        }
    }
}
