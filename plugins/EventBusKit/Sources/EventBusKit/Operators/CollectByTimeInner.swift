import OpenCombine

/// The subscription of `Publishers.CollectByTime`: one upstream, one downstream, one scheduler.
///
/// Semantics, as Apple's Combine since macOS 10.15.2 / iOS 13.3 (recorded by CombineX's specs run
/// against it; pinned by `CollectByTimeConformanceTests`):
/// - **The tick.** A repeating timer is armed on the scheduler when the upstream subscription
///   arrives: first after one stride, then every stride. At each tick, the items collected since
///   the last array went out (the *window*) go downstream as one array — if there are any (an
///   empty window sends nothing) and if the downstream has demand.
/// - **The count** (`.byTimeOrCount`). A window that reaches `count` items is closed at once and
///   sent in an action scheduled right away on the scheduler — *not* inside the upstream's
///   `receive(_:)`: since 13.3, Combine delivers it through the scheduler (before, synchronously).
///   The tick keeps its own schedule: a count-closed array does not reset it.
/// - **Everything downstream goes through the scheduler.** Values and the completion are only
///   ever delivered from actions of the scheduler (tick, count-closed array, completion, or a
///   waiting array released by a request). In a module the scheduler is the mailbox queue, so the
///   whole pipeline stays on it. Only `receive(subscription:)` is called on the upstream's thread.
/// - **Completion through the scheduler.** `.finished` is scheduled: when its turn comes, the
///   window goes out as a last array, then `.finished`. `.failure` is scheduled too, and goes out
///   without the collected items (they are dropped, as in Combine) and without waiting for
///   demand. Either way the timer is cancelled as soon as the upstream completes.
/// - **Demand, `.byTime`.** Every downstream `request(n)` makes one upstream `request(.max(1))`,
///   and every item received returns `.max(1)`: the upstream is pulled one item at a time, as
///   many as it sends, whatever the downstream's demand. A tick sends only while the downstream
///   has demand (each array uses one; what the subscriber returns is added).
/// - **Demand, `.byTimeOrCount`.** A downstream `request(.max(n))` makes one upstream
///   `request(.max(n * count))`; `receive(_:)` always returns `.none`. When the subscriber
///   returns demand `d` for a count-closed array, the upstream is asked for `d * count` more;
///   demand returned for an array the tick cut is added to the downstream's demand but *not*
///   requested upstream (Combine's behaviour: those arrays were shorter than `count`, so the
///   upstream still has grant left over for them).
/// - **Items collected without demand are kept, not lost** (Combine leaves this open; this is
///   the SDK's choice). A tick that finds no demand sends nothing and leaves the window open, so
///   those items go out with the next tick that has demand, in one array with what arrived
///   since. A count-closed array that finds no demand waits; a later `request` releases it (in a
///   scheduled action), before anything newer. So every item the upstream delivers reaches the
///   downstream exactly once, in order — what is held is bounded by what the upstream sends:
///   with `.byTimeOrCount` that is what was requested, with `.byTime` whatever it sends (put
///   bounded demand on a bus publisher upstream if that matters: it buffers and announces loss).
///   A finish whose last array has no demand waits for it the same way.
/// - `cancel()` cancels the upstream and the timer; nothing more goes downstream (a delivery that
///   another thread had already begun still completes). A second subscription from the
///   upstream is cancelled. `request(.none)` is ignored.
///
/// Threads: the lock guards all state and is never held while calling the downstream, the
/// upstream or the scheduler. Delivery is serialized with the drain pattern (as in `MergeInner`):
/// whichever scheduled action finds nobody draining delivers, outside the lock, until nothing
/// more may go; others only record what they are for (a tick leaves `cutDue`) and leave. So the
/// downstream never sees two calls at once even on a concurrent scheduler, and a `request`,
/// `cancel` or upstream value from inside the downstream's `receive(_:)` is handled after that
/// call returns.
///
/// `@unchecked Sendable`: the upstream, the scheduler and the downstream call in from any thread;
/// all mutable state is guarded by `lock`, and `downstream` is only called by the single drainer.
final class CollectByTimeInner<Input, Context: Scheduler, Downstream: Subscriber>:
    Subscriber, Subscription, CustomStringConvertible, @unchecked Sendable
where Downstream.Input == [Input] {
    typealias Failure = Downstream.Failure

    var description: String { "CollectByTime" }
    let combineIdentifier = CombineIdentifier()

    private let downstream: Downstream
    private let scheduler: Context
    private let stride: Context.SchedulerTimeType.Stride
    /// `nil` for `.byTime`; the size at which `.byTimeOrCount` closes a window.
    private let count: Int?
    private let options: Context.SchedulerOptions?
    private let lock = OperatorLock()

    // All guarded by `lock`.
    private var subscribed = false
    /// The upstream's subscription, until it completes or the downstream cancels.
    private var upstream: Subscription?
    private var timer: Cancellable?
    /// The items collected since the last array went out.
    private var window: [Input] = []
    /// Closed arrays waiting for demand: count-closed windows, and the last window after a finish.
    /// Always older than `window`.
    private var ready = FIFO<[Input]>()
    private var demand = Subscribers.Demand.none
    /// The upstream's completion, once received (its delivery is scheduled).
    private var upstreamCompletion: Subscribers.Completion<Failure>?
    /// The completion's scheduled action has run: it goes downstream once `ready` is empty
    /// (`.finished`) or at once (`.failure`).
    private var completionDue = false
    /// A tick came: the window may go out once, if there is demand for it after `ready`.
    private var cutDue = false
    /// The downstream got its completion or cancelled: nothing more goes to it.
    private var terminated = false
    private var draining = false
    /// An action to deliver `ready` is scheduled and has not started yet.
    private var drainScheduled = false

    init(
        downstream: Downstream,
        strategy: Publishers.TimeGroupingStrategy<Context>,
        options: Context.SchedulerOptions?
    ) {
        self.downstream = downstream
        self.options = options
        switch strategy {
        case let .byTime(scheduler, stride):
            self.scheduler = scheduler
            self.stride = stride
            count = nil
        case let .byTimeOrCount(scheduler, stride, count):
            self.scheduler = scheduler
            self.stride = stride
            self.count = max(1, count)
        }
    }

    // MARK: Upstream side

    func receive(subscription: Subscription) {
        lock.lock()
        guard !subscribed, !terminated else {
            lock.unlock()
            subscription.cancel()
            return
        }
        subscribed = true
        upstream = subscription
        lock.unlock()

        // Armed before the downstream can cancel, so a cancel from its `receive(subscription:)`
        // finds the timer. Weak: a timer whose cancellable leaked must not keep the pipeline alive.
        let timer = scheduler.schedule(
            after: scheduler.now.advanced(by: stride),
            interval: stride,
            tolerance: scheduler.minimumTolerance,
            options: options
        ) { [weak self] in
            self?.tick()
        }
        lock.lock()
        let armed = !terminated && upstreamCompletion == nil
        if armed { self.timer = timer }
        lock.unlock()
        if !armed { timer.cancel() }

        downstream.receive(subscription: self)
    }

    func receive(_ input: Input) -> Subscribers.Demand {
        lock.lock()
        guard !terminated, upstreamCompletion == nil else {
            lock.unlock()
            return .none
        }
        window.append(input)
        var schedule = false
        if let count, window.count >= count {
            ready.append(window)
            window = []
            schedule = claimDrainLocked()
        }
        lock.unlock()
        if schedule { scheduleDrain() }
        // `.byTime` pulls one item at a time, for ever; `.byTimeOrCount` only what was requested.
        return count == nil ? .max(1) : .none
    }

    func receive(completion: Subscribers.Completion<Failure>) {
        lock.lock()
        guard !terminated, upstreamCompletion == nil else { return lock.unlock() }
        upstreamCompletion = completion
        upstream = nil
        let timer = self.timer
        self.timer = nil
        lock.unlock()
        timer?.cancel()
        // Strong: the completion must be delivered even if nothing else holds this inner.
        scheduler.schedule(options: options) { self.completionTurn() }
    }

    // MARK: Downstream side

    func request(_ more: Subscribers.Demand) {
        guard more > 0 else { return }
        lock.lock()
        guard !terminated else { return lock.unlock() }
        demand += more
        let upstream = self.upstream  // nil once the upstream completed: nothing to ask for
        let schedule = !ready.isEmpty && claimDrainLocked()
        lock.unlock()
        upstream?.request(count.map { more * $0 } ?? .max(1))
        if schedule { scheduleDrain() }
    }

    func cancel() {
        lock.lock()
        guard !terminated else { return lock.unlock() }
        terminated = true
        window = []
        ready.removeAll()
        let upstream = self.upstream, timer = self.timer
        self.upstream = nil
        self.timer = nil
        lock.unlock()
        upstream?.cancel()
        timer?.cancel()
    }

    // MARK: Scheduled actions

    private func tick() {
        lock.lock()
        guard !terminated, upstreamCompletion == nil else { return lock.unlock() }
        cutDue = true
        guard !draining else { return lock.unlock() }  // the drainer sees `cutDue`
        draining = true
        drainLocked()
    }

    private func completionTurn() {
        lock.lock()
        guard !terminated else { return lock.unlock() }
        completionDue = true
        if case .finished? = upstreamCompletion, !window.isEmpty {
            ready.append(window)
            window = []
        }
        guard !draining else { return lock.unlock() }
        draining = true
        drainLocked()
    }

    private func drainTurn() {
        lock.lock()
        drainScheduled = false
        guard !terminated, !draining else { return lock.unlock() }
        draining = true
        drainLocked()
    }

    /// Whether the caller must schedule a drain of `ready`: not if one is scheduled already, nor
    /// while somebody drains (the drainer looks at `ready` again before it stops).
    private func claimDrainLocked() -> Bool {
        guard !drainScheduled, !draining else { return false }
        drainScheduled = true
        return true
    }

    private func scheduleDrain() {
        scheduler.schedule(options: options) { self.drainTurn() }
    }

    // MARK: Draining

    /// Delivers while there is something the downstream may receive: waiting arrays first (oldest
    /// first), then the window if a tick asked for it, then the completion. Called with the lock
    /// held by the caller that set `draining`; returns with the lock released and `draining`
    /// cleared.
    private func drainLocked() {
        while !terminated {
            if completionDue, case .failure(let error)? = upstreamCompletion {
                terminated = true
                window = []
                ready.removeAll()
                draining = false
                lock.unlock()
                downstream.receive(completion: .failure(error))
                return
            }
            if demand > 0, let array = ready.popFirst() {
                demand -= 1
                lock.unlock()
                let more = downstream.receive(array)
                lock.lock()
                guard !terminated, more > 0 else { continue }
                demand += more
                // A count-closed array renews the upstream's grant by `count` per array asked for.
                if let count, let upstream {
                    lock.unlock()
                    upstream.request(more * count)
                    lock.lock()
                }
                continue
            }
            if cutDue {
                cutDue = false
                // No demand: the window stays open and goes with the next tick that has some.
                if demand > 0, !window.isEmpty {
                    let array = window
                    window = []
                    demand -= 1
                    lock.unlock()
                    let more = downstream.receive(array)
                    lock.lock()
                    if !terminated { demand += more }  // not requested upstream (Combine's rule)
                    continue
                }
            }
            if completionDue, ready.isEmpty {  // `.finished`: `.failure` went above
                terminated = true
                draining = false
                lock.unlock()
                downstream.receive(completion: .finished)
                return
            }
            break
        }
        draining = false
        lock.unlock()
    }
}
