import OpenCombine

/// The subscription shared by `CombineLatest`, `CombineLatest3` and `CombineLatest4`.
///
/// Each upstream reaches it through a `CombineLatestSide`, which stores the upstream's latest value
/// in its own typed `LatestValue` slot; `combine` reads all slots into the output tuple. That keeps
/// the inner independent of the upstreams' output types without boxing every value in `Any`.
///
/// Semantics, as Apple's CombineLatest unless noted:
/// - Nothing is emitted until every upstream has produced a value; after that, every new value
///   emits the tuple of the latest values, snapshotted when the value arrives, so under concurrent
///   or re-entrant sends no intermediate combination is skipped while demand allows it.
///   *Deviation:* Apple's drops a value sent re-entrantly from inside the downstream's `receive`.
/// - Demand passes through: every `request(n)` is forwarded to all upstreams (to one that
///   subscribes later, on subscription). So is demand the downstream returns from `receive(_:)`:
///   to the upstream whose value was being delivered as its call's result, to the others by
///   `request`. *Deviation:* Apple's gives that demand to the delivering upstream only, which can
///   starve the others.
/// - When a combination arrives while the downstream has no demand left, only the latest one is
///   kept and it is emitted as soon as demand arrives. *Deviation:* Apple's implementation drops it
///   and emits nothing until some upstream sends again, so the downstream can miss the final state.
/// - `.finished` once every upstream has finished — even if one of them finished without ever
///   producing a value (then nothing is ever emitted, but the publisher still waits for the others;
///   this is Apple's observed behaviour, although its documentation says "never finishes"). A kept
///   combination (see above) is delivered before the completion, which therefore waits for demand.
/// - The first `.failure` goes downstream at once and cancels the other upstreams; upstreams not
///   yet subscribed by then (say, after a `Fail`) are never subscribed.
/// - After a completion or `cancel()`, nothing more is delivered (a delivery that another thread
///   had already begun when `cancel()` was called still completes).
///
/// Delivery is serialized exactly as in `MergeInner` (the drain pattern): the downstream never sees
/// concurrent calls, and re-entrant sends, requests and cancels from inside its `receive` are
/// handled right after that call returns.
///
/// `@unchecked Sendable`: upstreams call in from any thread; all mutable state, the slots included,
/// is guarded by `lock`, and `downstream` is only called by the single drainer.
final class CombineLatestInner<Downstream: Subscriber>: Subscription, CustomStringConvertible,
    @unchecked Sendable
{
    typealias Output = Downstream.Input
    typealias Failure = Downstream.Failure

    var description: String { "CombineLatest" }

    private let downstream: Downstream
    /// Builds the output from the slots; only called with `lock` held, once all slots are set.
    private let combine: () -> Output
    private let lock = OperatorLock()

    // All guarded by `lock`.
    private var upstreams: UpstreamSlots
    private var hasValue: [Bool]
    private var withValueCount = 0
    /// Combinations already counted against `demand`, in arrival order.
    private var queue = FIFO<Output>()
    /// A combination arrived while there was no demand; it is built when demand comes.
    private var pendingCombination = false
    private var demand = Subscribers.Demand.none
    /// Everything forwarded upstream so far: what an upstream that subscribes late is owed.
    private var forwarded = Subscribers.Demand.none
    private var failure: Failure?
    private var terminated = false
    private var draining = false

    init(downstream: Downstream, upstreamCount: Int, combine: @escaping () -> Output) {
        self.downstream = downstream
        self.combine = combine
        upstreams = UpstreamSlots(count: upstreamCount)
        hasValue = Array(repeating: false, count: upstreamCount)
    }

    /// Hands the subscription downstream before any upstream is subscribed, so an upstream that
    /// completes during `subscribe` never races the downstream's subscription.
    func start() {
        downstream.receive(subscription: self)
    }

    /// Subscribes upstream `index`, unless the combination already ended (a failure before it, or a
    /// downstream that cancelled) — then starting that upstream would be wasted work.
    func subscribe<Upstream: Publisher>(
        _ upstream: Upstream, at index: Int, into slot: LatestValue<Upstream.Output>
    ) where Upstream.Failure == Failure {
        lock.lock()
        let ended = terminated || failure != nil
        lock.unlock()
        guard !ended else { return }
        upstream.subscribe(CombineLatestSide(index: index, slot: slot, inner: self))
    }

    // MARK: Downstream side

    func request(_ newDemand: Subscribers.Demand) {
        guard newDemand > 0 else { return }
        lock.lock()
        guard !terminated, failure == nil else { return lock.unlock() }
        let targets = addDemandLocked(newDemand, except: nil)
        let drain = !draining
        draining = true
        lock.unlock()
        // Forwarded while this thread is the drainer: what upstreams send synchronously in
        // response is queued and delivered by the drain below, in order.
        targets.forEach { $0.request(newDemand) }
        guard drain else { return }
        lock.lock()
        _ = drainLocked(caller: nil)
    }

    func cancel() {
        lock.lock()
        guard !terminated else { return lock.unlock() }
        terminated = true
        queue.removeAll()
        let live = upstreams.removeAll()
        lock.unlock()
        live.forEach { $0.cancel() }
    }

    // MARK: Upstream side (through CombineLatestSide)

    fileprivate func receive(subscription: Subscription, at index: Int) {
        lock.lock()
        guard !terminated, failure == nil, upstreams.accept(subscription, at: index) else {
            lock.unlock()
            subscription.cancel()
            return
        }
        let owed = forwarded
        lock.unlock()
        if owed > 0 { subscription.request(owed) }
    }

    /// `store` writes the value into the upstream's slot; it runs under the lock.
    fileprivate func receive(at index: Int, store: () -> Void) -> Subscribers.Demand {
        lock.lock()
        guard !terminated, failure == nil, !upstreams.hasCompleted(index) else {
            lock.unlock()
            return .none
        }
        store()
        if !hasValue[index] {
            hasValue[index] = true
            withValueCount += 1
        }
        if withValueCount == hasValue.count {
            pendingCombination = true
            takePendingCombinationLocked()
        }
        guard !draining else {
            lock.unlock()
            return .none
        }
        draining = true
        return drainLocked(caller: index)
    }

    fileprivate func receive(completion: Subscribers.Completion<Failure>, at index: Int) {
        lock.lock()
        guard !terminated, failure == nil, !upstreams.hasCompleted(index) else { return lock.unlock() }
        upstreams.complete(index)
        switch completion {
        case .finished:
            guard upstreams.allCompleted, !draining else { return lock.unlock() }
            draining = true
            _ = drainLocked(caller: nil)
        case .failure(let error):
            failure = error
            queue.removeAll()
            pendingCombination = false
            let others = upstreams.removeAll()
            let drain = !draining
            draining = true
            lock.unlock()
            others.forEach { $0.cancel() }
            guard drain else { return }  // the current drainer delivers the failure
            lock.lock()
            _ = drainLocked(caller: nil)
        }
    }

    // MARK: Draining

    /// Moves the pending combination, if any, into the queue when there is demand for it.
    private func takePendingCombinationLocked() {
        guard pendingCombination, demand > 0 else { return }
        pendingCombination = false
        demand -= 1
        queue.append(combine())
    }

    /// Adds downstream demand and returns the upstreams (but `except`) it must be forwarded to.
    private func addDemandLocked(_ more: Subscribers.Demand, except: Int?) -> [Subscription] {
        demand += more
        forwarded += more
        takePendingCombinationLocked()
        return upstreams.live(except: except)
    }

    /// Delivers while there is something the downstream may receive. Called with the lock held by
    /// the caller that set `draining`; returns with the lock released and `draining` cleared.
    /// Returns the demand the downstream added that upstream `caller` is owed: it is inside its own
    /// `receive(_:)` and gets it as that call's result rather than as a nested `request`.
    private func drainLocked(caller: Int?) -> Subscribers.Demand {
        var callerDemand = Subscribers.Demand.none
        while true {
            if terminated {
                draining = false
                lock.unlock()
                return callerDemand
            }
            if let failure {
                terminated = true
                draining = false
                lock.unlock()
                downstream.receive(completion: .failure(failure))
                return callerDemand
            }
            if let output = queue.popFirst() {
                lock.unlock()
                let more = downstream.receive(output)
                lock.lock()
                guard more > 0, !terminated, failure == nil else { continue }
                let targets = addDemandLocked(more, except: caller)
                if let caller, upstreams[caller] != nil { callerDemand += more }
                if !targets.isEmpty {
                    lock.unlock()
                    targets.forEach { $0.request(more) }
                    lock.lock()
                }
                continue
            }
            if upstreams.allCompleted, !pendingCombination {
                terminated = true
                draining = false
                lock.unlock()
                downstream.receive(completion: .finished)
                return callerDemand
            }
            draining = false
            lock.unlock()
            return callerDemand
        }
    }
}

/// The latest value of one upstream of a combineLatest, guarded by its inner's lock. A class so
/// that the typed side subscriber writes it and the inner's `combine` closure reads it.
final class LatestValue<Value> {
    var value: Value?
}

/// The subscriber one upstream of a combineLatest talks to: its index and its value slot.
struct CombineLatestSide<Input, Downstream: Subscriber>: Subscriber, CustomStringConvertible {
    typealias Failure = Downstream.Failure

    let index: Int
    let slot: LatestValue<Input>
    let inner: CombineLatestInner<Downstream>
    let combineIdentifier = CombineIdentifier()
    var description: String { "CombineLatest" }

    func receive(subscription: Subscription) {
        inner.receive(subscription: subscription, at: index)
    }

    func receive(_ input: Input) -> Subscribers.Demand {
        inner.receive(at: index) { slot.value = input }
    }

    func receive(completion: Subscribers.Completion<Failure>) {
        inner.receive(completion: completion, at: index)
    }
}
