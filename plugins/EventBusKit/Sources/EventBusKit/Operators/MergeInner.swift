import OpenCombine

/// The subscription shared by `Merge` … `Merge8` and `MergeMany`: N upstreams, one downstream,
/// each upstream reaching it through a `MergeSide` that carries its index.
///
/// Demand and buffering follow Apple's Merge (pinned by `MergeConformanceTests`):
/// - While the downstream's demand is bounded, every upstream is granted one value at a time
///   (`.max(1)`). A value that can go downstream at once renews its upstream's grant through the
///   return value of that upstream's `receive(_:)`; one that cannot waits and is renewed with
///   `request(.max(1))` when it goes out.
/// - **One waiting value per upstream.** A value that arrives while the downstream has no demand
///   waits in its upstream's slot; a newer one from the same upstream (one that sent beyond its
///   grant) replaces it. When demand arrives, slots are served in upstream index order — not in
///   arrival order. So a merge never holds more than N values, whatever its upstreams do.
/// - Once the downstream asks for `.unlimited`, the slots are flushed (index order), every
///   upstream gets `.unlimited` and grants stop.
/// - `.finished` once every upstream has finished and no value waits; the first `.failure` goes
///   downstream at once (waiting values are dropped) and **cancels every upstream, the failed one
///   included**, as Combine does.
/// - `request(.none)` is ignored (Apple's Merge ignores it too; its CombineLatest traps).
///
/// Where a module needs every value of every upstream in arrival order under bounded demand, the
/// upstreams should be bus publishers: each bus subscription keeps its own bounded, announced
/// buffer (docs/bus.md, "Where nothing is lost"), so a merge of them loses nothing.
///
/// Threads: delivery is serialized with the "drain" pattern: whoever changes the state under the
/// lock and finds nobody draining becomes the drainer and delivers waiting values (and the
/// completion) outside the lock until there is nothing it may deliver; everybody else only
/// stores and leaves. So the downstream never sees two calls at once, and nested calls from
/// inside its own `receive` (a subject sent to, a `request`, a `cancel`) are handled right after
/// the call in flight returns instead of nested in it (Apple's nests them under a recursive lock;
/// the order of values is the same). Under `.unlimited`, values that arrive from other threads
/// while one thread delivers wait in arrival order (nothing is replaced: there is demand for
/// all). After a completion or `cancel()`, nothing more is delivered (a delivery that another
/// thread had already begun when `cancel()` was called still completes).
///
/// Other departures from Apple's implementation: upstreams not yet subscribed when the merge
/// ends (say, after a `Fail`) are never subscribed, rather than subscribed and cancelled at once;
/// a `MergeMany` of zero publishers finishes at once; and an upstream that breaks the Publisher
/// contract — a second `.finished`, values after its completion — is held to it: what it sends
/// after its first completion is ignored, where Apple's Merge counts every `.finished` (one
/// upstream finishing twice can end the merge while others still run) and forwards later values.
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
    /// The value each upstream has waiting (bounded demand); a newer one replaces it.
    private var waiting: [Input?]
    private var waitingCount = 0
    /// Values waiting in arrival order once demand is unlimited.
    private var queue = FIFO<Input>()
    private var demand = Subscribers.Demand.none
    private var unlimited = false
    private var failure: Failure?
    /// The downstream got its completion or cancelled: nothing more goes to it.
    private var terminated = false
    private var draining = false

    init(downstream: Downstream, upstreamCount: Int) {
        self.downstream = downstream
        upstreams = UpstreamSlots(count: upstreamCount)
        waiting = Array(repeating: nil, count: upstreamCount)
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
            // Still the drainer: values these requests produce synchronously wait, then go out
            // in the drain below — after the slots, as in Combine.
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
        clearWaitingLocked()
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
        lock.unlock()
        subscription.request(initial)
    }

    fileprivate func receive(_ value: Input, at index: Int) -> Subscribers.Demand {
        lock.lock()
        guard !terminated, failure == nil, !upstreams.hasCompleted(index) else {
            lock.unlock()
            return .none
        }
        if unlimited {
            queue.append(value)
        } else {
            if waiting[index] == nil { waitingCount += 1 }
            waiting[index] = value  // a value still waiting from this upstream is replaced
        }
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
        switch completion {
        case .finished:
            upstreams.complete(index)
            // Only the last one matters; if somebody is draining, it sees it before it stops.
            guard upstreams.allCompleted, !draining else { return lock.unlock() }
            draining = true
            _ = drainLocked(caller: nil)
        case .failure(let error):
            failure = error
            clearWaitingLocked()
            let all = upstreams.removeAll()  // the failed one too: Combine cancels it as well
            upstreams.complete(index)
            let drain = !draining
            draining = true
            lock.unlock()
            all.forEach { $0.cancel() }
            guard drain else { return }  // the current drainer delivers the failure
            lock.lock()
            _ = drainLocked(caller: nil)
        }
    }

    // MARK: Draining

    private func clearWaitingLocked() {
        queue.removeAll()
        waiting = Array(repeating: nil, count: waiting.count)
        waitingCount = 0
    }

    /// Adds downstream demand; on the switch to `.unlimited`, returns the upstreams that must now
    /// be asked for `.unlimited` (outside the lock).
    private func addDemandLocked(_ more: Subscribers.Demand) -> [Subscription] {
        demand += more
        guard more == .unlimited, !unlimited else { return [] }
        unlimited = true
        return upstreams.live()
    }

    /// The next value that may go downstream: the first upstream's (by index) waiting value,
    /// then the arrival-ordered queue. Counts it against the demand.
    private func takeNextLocked() -> (index: Int?, value: Input)? {
        guard demand > 0 else { return nil }
        if waitingCount > 0, let index = waiting.firstIndex(where: { $0 != nil }) {
            let value = waiting[index]!
            waiting[index] = nil
            waitingCount -= 1
            demand -= 1
            return (index, value)
        }
        if let value = queue.popFirst() {
            demand -= 1
            return (nil, value)
        }
        return nil
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
            if let (index, value) = takeNextLocked() {
                lock.unlock()
                let more = downstream.receive(value)
                lock.lock()
                guard !terminated else { continue }
                var toRequest: [(Subscription, Subscribers.Demand)] = []
                if more > 0 {
                    toRequest = addDemandLocked(more).map { ($0, .unlimited) }
                }
                // A value that waited in a slot renews its upstream's grant once it is out.
                if let index, !unlimited, let upstream = upstreams[index] {
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
            if upstreams.allCompleted, waitingCount == 0, queue.isEmpty {
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
