import OpenCombine

/// The subscription shared by `Merge`, `Merge3`, `Merge4` and `MergeMany`: N upstreams, one
/// downstream, each upstream reaching it through a `MergeSide` that carries its index.
///
/// Demand follows Apple's Merge. While the downstream's demand is bounded, every upstream is
/// granted exactly one value at a time (`.max(1)`), and the grant is renewed only after that value
/// has been delivered — so each upstream has at most one value waiting here, and none is ever
/// delivered beyond the downstream's demand. A value delivered during the upstream's own
/// `receive(_:)` renews the grant through the return value (`.max(1)`), as Combine does; one that
/// waited is renewed with `request(.max(1))` when it goes out. Once the downstream asks for
/// `.unlimited`, every upstream gets `.unlimited` and grants stop.
///
/// Delivery is serialized with the "drain" pattern: whoever changes the state under the lock and
/// finds nobody draining becomes the drainer and delivers queued values (and the completion)
/// outside the lock until there is nothing it may deliver; everybody else only queues and leaves.
/// So the downstream never sees two calls at once, nested calls from inside its own `receive`
/// (a subject sent to, a `request`, a `cancel`) never deadlock, and they are handled right after
/// the call in flight returns. Values are delivered in the order they arrived here, so each
/// upstream's order is kept.
///
/// Completion: `.finished` once every upstream has finished and the queue is empty; the first
/// `.failure` goes downstream at once (queued values are dropped, as in Combine) and cancels the
/// other upstreams. After a completion or `cancel()`, nothing more is delivered (a delivery that
/// another thread had already begun when `cancel()` was called still completes).
///
/// Where this deliberately differs from Apple's implementation: an upstream that sends more than it
/// was granted has its surplus queued, not overwritten (Apple keeps one value per upstream and
/// drops the rest), and it gets no new grant until the surplus has been delivered; the upstream
/// that failed is not cancelled (Apple cancels it too, a no-op on a completed subscription);
/// upstreams not yet subscribed when the merge ends (say, after a `Fail`) are never subscribed,
/// rather than subscribed and cancelled at once; and a `MergeMany` of zero publishers finishes at
/// once.
///
/// `@unchecked Sendable`: upstreams call in from any thread; all mutable state is guarded by `lock`,
/// and `downstream` is only called by the single drainer.
final class MergeInner<Downstream: Subscriber>: Subscription, CustomStringConvertible,
    @unchecked Sendable
{
    typealias Input = Downstream.Input
    typealias Failure = Downstream.Failure

    var description: String { "Merge" }

    private let downstream: Downstream
    private let lock = OperatorLock()

    // All guarded by `lock`.
    private var upstreams: UpstreamSlots
    /// Values each upstream may still send under its current grant (bounded mode only).
    private var granted: [Int]
    /// Values of each upstream waiting in `queue`.
    private var queued: [Int]
    private var queue = FIFO<(index: Int, value: Input)>()
    private var demand = Subscribers.Demand.none
    private var unlimited = false
    private var failure: Failure?
    /// The downstream got its completion or cancelled: nothing more goes to it.
    private var terminated = false
    private var draining = false

    init(downstream: Downstream, upstreamCount: Int) {
        self.downstream = downstream
        upstreams = UpstreamSlots(count: upstreamCount)
        granted = Array(repeating: 0, count: upstreamCount)
        queued = Array(repeating: 0, count: upstreamCount)
    }

    /// Hands the subscription downstream, before any upstream is subscribed (as Combine does), so
    /// a downstream that asks for `.unlimited` right away makes upstreams see only `.unlimited`.
    func start() {
        downstream.receive(subscription: self)
        if upstreams.isEmpty {  // "all upstreams finished" already holds: finish now
            lock.lock()
            guard !draining else { return lock.unlock() }
            draining = true
            _ = drainLocked(caller: nil)
        }
    }

    /// Subscribes upstream `index`, unless the merge already ended (a `Fail` before it, or a
    /// downstream that cancelled) — then starting that upstream would be wasted work.
    func subscribe<Upstream: Publisher>(_ upstream: Upstream, at index: Int)
    where Upstream.Output == Input, Upstream.Failure == Failure {
        lock.lock()
        let ended = terminated || failure != nil
        lock.unlock()
        guard !ended else { return }
        upstream.subscribe(MergeSide(index: index, inner: self))
    }

    // MARK: Downstream side

    func request(_ newDemand: Subscribers.Demand) {
        guard newDemand > 0 else { return }
        lock.lock()
        guard !terminated else { return lock.unlock() }
        let toUnlimit = addDemandLocked(newDemand)
        if draining {
            lock.unlock()
            toUnlimit.forEach { $0.request(.unlimited) }
            return
        }
        draining = true
        if !toUnlimit.isEmpty {
            // Still the drainer: values these requests produce synchronously are queued, then
            // delivered by the drain below.
            lock.unlock()
            toUnlimit.forEach { $0.request(.unlimited) }
            lock.lock()
        }
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

    // MARK: Upstream side (through MergeSide)

    fileprivate func receive(subscription: Subscription, at index: Int) {
        lock.lock()
        guard !terminated, failure == nil, upstreams.accept(subscription, at: index) else {
            lock.unlock()
            subscription.cancel()
            return
        }
        let initial: Subscribers.Demand = unlimited ? .unlimited : .max(1)
        if !unlimited { granted[index] = 1 }
        lock.unlock()
        subscription.request(initial)
    }

    fileprivate func receive(_ value: Input, at index: Int) -> Subscribers.Demand {
        lock.lock()
        guard !terminated, failure == nil, !upstreams.hasCompleted(index) else {
            lock.unlock()
            return .none
        }
        if granted[index] > 0 { granted[index] -= 1 }
        queue.append((index, value))
        queued[index] += 1
        guard !draining else {
            lock.unlock()
            return .none  // the drainer delivers it and renews the grant with `request`
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
            // Only the last one matters; if somebody is draining, it sees it before it stops.
            guard upstreams.allCompleted, !draining else { return lock.unlock() }
            draining = true
            _ = drainLocked(caller: nil)
        case .failure(let error):
            failure = error
            queue.removeAll()
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

    /// Adds downstream demand; on the switch to `.unlimited`, returns the upstreams that must now
    /// be asked for `.unlimited` (outside the lock).
    private func addDemandLocked(_ more: Subscribers.Demand) -> [Subscription] {
        demand += more
        guard more == .unlimited, !unlimited else { return [] }
        unlimited = true
        return upstreams.live()
    }

    /// Delivers while there is something the downstream may receive. Called with the lock held by
    /// the caller that set `draining`; returns with the lock released and `draining` cleared.
    /// Returns the grant renewed for upstream `caller`, which is inside its own `receive(_:)` and
    /// must get it as that call's result rather than as a nested `request`.
    private func drainLocked(caller: Int?) -> Subscribers.Demand {
        var callerGrant = Subscribers.Demand.none
        while true {
            if terminated {
                draining = false
                lock.unlock()
                return callerGrant
            }
            if let failure {
                terminated = true
                draining = false
                lock.unlock()
                downstream.receive(completion: .failure(failure))
                return callerGrant
            }
            if demand > 0, let (index, value) = queue.popFirst() {
                queued[index] -= 1
                demand -= 1
                lock.unlock()
                let more = downstream.receive(value)
                lock.lock()
                guard !terminated else { continue }
                var toRequest: [(Subscription, Subscribers.Demand)] = []
                if more > 0 {
                    toRequest = addDemandLocked(more).map { ($0, .unlimited) }
                }
                if !unlimited, let upstream = upstreams[index],
                   granted[index] == 0, queued[index] == 0 {
                    granted[index] = 1
                    if index == caller {
                        callerGrant += 1
                    } else {
                        toRequest.append((upstream, .max(1)))
                    }
                }
                if !toRequest.isEmpty {
                    lock.unlock()
                    toRequest.forEach { $0.0.request($0.1) }
                    lock.lock()
                }
                continue
            }
            if upstreams.allCompleted, queue.isEmpty {
                terminated = true
                draining = false
                lock.unlock()
                downstream.receive(completion: .finished)
                return callerGrant
            }
            draining = false
            lock.unlock()
            return callerGrant
        }
    }
}

/// The subscriber one upstream of a merge talks to: it only adds the upstream's index.
struct MergeSide<Downstream: Subscriber>: Subscriber, CustomStringConvertible {
    typealias Input = Downstream.Input
    typealias Failure = Downstream.Failure

    let index: Int
    let inner: MergeInner<Downstream>
    let combineIdentifier = CombineIdentifier()
    var description: String { "Merge" }

    func receive(subscription: Subscription) {
        inner.receive(subscription: subscription, at: index)
    }

    func receive(_ input: Input) -> Subscribers.Demand {
        inner.receive(input, at: index)
    }

    func receive(completion: Subscribers.Completion<Failure>) {
        inner.receive(completion: completion, at: index)
    }
}
