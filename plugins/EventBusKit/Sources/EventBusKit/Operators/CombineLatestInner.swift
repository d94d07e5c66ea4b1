import OpenCombine

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The subscription shared by `CombineLatest`, `CombineLatest3` and `CombineLatest4`.
///
/// Each upstream reaches it through a `CombineLatestSide`, which stores the upstream's latest value
/// in its own typed `LatestValue` slot; `combine` reads all slots into the output tuple. That keeps
/// the inner independent of the upstreams' output types without boxing every value in `Any`.
///
/// Semantics, as Apple's CombineLatest (pinned by `CombineLatestConformanceTests`):
/// - Nothing is emitted until every upstream has produced a value; after that, a new value emits
///   the tuple of the latest values — if the downstream has demand at that moment.
/// - **No demand, no combination.** A value that arrives while the downstream's demand is 0 is
///   recorded as its upstream's latest, and nothing is kept to send later: the next output is the
///   combination formed by the next upstream value that arrives once there is demand again.
/// - **No re-entrant delivery.** A value sent from inside the downstream's own `receive(_:)` into
///   one of these upstreams (on that same thread) is recorded as latest but not emitted, whatever
///   the demand: it shows in the next combination another upstream value produces. So a
///   subscriber that writes back into its source on every output gets one output per outside
///   value — never a loop. Apple's implementation does exactly this (a "recursion" flag set
///   around the downstream call).
/// - Requesting `.none` is a programming error and traps (`fatalError`), as Combine's
///   precondition does.
/// - Demand passes through: every `request(n)` is forwarded to all upstreams (to one that
///   subscribes later, on subscription). *Deviation:* demand the downstream returns from
///   `receive(_:)` goes to the delivering upstream as its call's result *and* to the others by
///   `request`; Apple's gives it to the delivering upstream only, which can starve the others.
/// - `.finished` once every upstream has finished — even if one of them finished without ever
///   producing a value (then nothing is ever emitted, but the publisher still waits for the others;
///   this is Apple's observed behaviour, although its documentation says "never finishes").
/// - The first `.failure` goes downstream at once and cancels the other upstreams; upstreams not
///   yet subscribed by then (say, after a `Fail`) are never subscribed.
/// - After a completion or `cancel()`, nothing more is delivered (a delivery that another thread
///   had already begun when `cancel()` was called still completes).
///
/// Threads: delivery is serialized exactly as in `MergeInner` (the drain pattern), so the
/// downstream never sees concurrent calls. A value from *another* thread that arrives while one
/// thread is delivering is not lost: if there is demand, its combination (snapshotted on arrival)
/// is queued and delivered when the current call returns. (Apple's blocks that thread on a
/// recursive lock instead, or drops it if it sees the recursion flag first — a race; queueing
/// keeps every combination the demand allows.) Requests and cancels from inside `receive` are
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
    /// Combinations already counted against `demand` (from other threads while one delivered).
    private var queue = FIFO<Output>()
    private var demand = Subscribers.Demand.none
    /// Everything forwarded upstream so far: what an upstream that subscribes late is owed.
    private var forwarded = Subscribers.Demand.none
    private var failure: Failure?
    private var terminated = false
    private var draining = false
    /// The thread inside `downstream.receive(_:)`, while it is: a value it sends is re-entrant.
    private var receivingThread: pthread_t?

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
        if newDemand == .none {
            // Combine's precondition: a subscriber that asks for nothing has a bug; say where.
            fatalError("CombineLatest: request(.none) — demand must be greater than zero")
        }
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
        if let receivingThread, pthread_equal(receivingThread, pthread_self()) != 0 {
            // Sent from inside the downstream's `receive`: recorded, not emitted (Combine).
            lock.unlock()
            return .none
        }
        if withValueCount == hasValue.count, demand > 0 {
            demand -= 1
            queue.append(combine())
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

    /// Adds downstream demand and returns the upstreams (but `except`) it must be forwarded to.
    private func addDemandLocked(_ more: Subscribers.Demand, except: Int?) -> [Subscription] {
        demand += more
        forwarded += more
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
                receivingThread = pthread_self()
                lock.unlock()
                let more = downstream.receive(output)
                lock.lock()
                receivingThread = nil
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
            if upstreams.allCompleted {
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
