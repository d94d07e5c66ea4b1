import Dispatch
import Synchronization

/// A bounded, serial delivery queue: the lane of every subscription made through a bus handle
/// scoped to it (``Bus/scoped(to:)``). The host gives each handler module one.
///
/// Why: the bus's delivery loop must never wait for module code. Handing an event to a mailbox
/// is a lock, an append and — only when the mailbox was idle — one `DispatchQueue.async`, so a
/// burst costs one wake-up, not one per event. The module's pipelines then run on `queue`, one
/// call at a time.
///
/// Bounded twice: at most `capacity` events and at most `byteCapacity` bytes of them
/// (`Event.estimatedBytes`) wait — counted until their subscriber has been called, so the batch
/// the queue has taken counts too. Past either bound, events are dropped, counted in
/// ``Statistics/dropped``, and each affected subscription receives a ``Gap`` notice in their
/// place. A stalled module therefore loses its own events — and says so — but never slows the
/// publisher or any other module, nor holds more than its bytes of memory: ten thousand events
/// of a megabyte each would be ten gigabytes. An event larger than `byteCapacity` is still
/// taken when nothing waits, so no event is too large to be delivered at all.
///
/// An owner that passes events on to where the module handles them later — the host, to a
/// module's worker process — keeps them counted against both bounds until the module has
/// handled them (`keepElsewhere(events:bytes:)`), so the bounds hold for everything the
/// module holds, wherever it waits.
public final class Mailbox: Sendable {
    public let label: String
    public let capacity: Int
    public let byteCapacity: Int
    /// The serial queue all of this mailbox's deliveries run on. Use it as the scheduler of
    /// time-based operators (`debounce(for:scheduler: mailbox.queue)`) to stay on it.
    public let queue: DispatchQueue
    /// Where the queue goes back to when it gives its thread back.
    private let pool: DispatchQueue

    public struct Statistics: Sendable, Hashable {
        public var delivered: UInt64 = 0
        public var dropped: UInt64 = 0
        /// Events not yet handed to their subscriber: waiting in the mailbox, or taken by the
        /// queue in a batch behind the one it is running. (What a shutdown loses if the module
        /// never gets to them.)
        public var queued: Int = 0
        /// The estimated bytes of those events (0 when the mailbox has no byte bound).
        public var queuedBytes: Int = 0
        /// Events handed on that still count against the bounds until the module handles them
        /// (`keepElsewhere(events:bytes:)`: a module worker's events on their way to it and in
        /// its queue), and their estimated bytes.
        public var heldElsewhere: Int = 0
        public var heldElsewhereBytes: Int = 0
    }

    enum Job {
        case event(SubscriptionCore, Event, bytes: Int)
        case gap(SubscriptionCore, MailboxGap)
        case request(SubscriptionCore, Int)
        case release(SubscriptionCore)
        case finish(SubscriptionCore)
        case work(@Sendable () -> Void)
    }

    private struct State {
        var jobs = RingBuffer<Job>()
        var queuedEvents = 0
        /// The estimated bytes of the events queued or taken and not yet delivered.
        var heldBytes = 0
        /// Events of the batch the queue is running, while a batch observer is set: its
        /// subscriptions pass them on when the batch ends, so they count against the bound until
        /// then — kept (`keepElsewhere(events:bytes:)`) or let go. 0 without an observer.
        var runningEvents = 0
        /// The estimated bytes of the batch the queue is running (part of `heldBytes` until it ends).
        var runningBytes = 0
        /// Events handed on and their bytes, counted until released (`keepElsewhere(events:bytes:)`).
        var elsewhereEvents = 0
        var elsewhereBytes = 0
        var scheduled = false
        /// The batch observer held the queue: it stays `scheduled` (so nothing wakes it) and
        /// takes no job until ``resumeAfterHold()``.
        var held = false
        /// ``resumeAfterHold()`` came before the queue got to hold: the hold it answers is over
        /// before it began.
        var resumedEarly = false
        var statistics = Statistics()
        /// Called on the queue after each batch of jobs (see ``setBatchObserver(_:)``).
        var batchObserver: (@Sendable () -> Bool)?

        /// Whether the caller must wake the queue: only when it was idle.
        mutating func schedule() -> Bool {
            if scheduled { return false }
            scheduled = true
            return true
        }

        /// The batch the queue ran is over: what it did not keep stops counting.
        mutating func endBatch() {
            heldBytes -= runningBytes
            runningBytes = 0
            runningEvents = 0
        }
    }

    private let state = Locked(State())
    /// Events of the batch the queue is working through that it has not started yet: they left
    /// `queuedEvents` when the batch was taken, and are still waiting. Written by the queue only.
    private let takenNotRun = Atomic<Int>(0)
    /// Jobs taken per lock acquisition by the queue.
    private static let batchSize = 256
    /// Batches run before the queue gives its thread back to the pool, so a mailbox that never
    /// empties cannot keep a pool as narrow as the CPUs from the others.
    private static let batchesPerTurn = 16

    /// The default `byteCapacity`: 64 MiB.
    public static let defaultByteCapacity = 64 << 20

    /// A mailbox that holds at most `capacity` events and `byteCapacity` bytes of them
    /// (`Int.max`: unbounded, and the events' sizes are never estimated), whose queue runs on
    /// `pool` (nil: Dispatch's default for a serial queue, the overcommitting pool, which starts
    /// another thread whenever the running ones are busy — right for code that may block).
    public init(label: String, capacity: Int = 10_000, byteCapacity: Int = Mailbox.defaultByteCapacity,
                pool: DispatchQueue? = nil) {
        self.label = label
        self.capacity = max(1, capacity)
        self.byteCapacity = max(1, byteCapacity)
        self.queue = DispatchQueue(label: "eventbus.mailbox.\(label)", target: pool)
        self.pool = pool ?? .global()
    }

    public var statistics: Statistics {
        state.withLock { state in
            var statistics = state.statistics
            let notRun = takenNotRun.load(ordering: .relaxed)
            statistics.queued = state.queuedEvents + notRun
            statistics.queuedBytes = state.heldBytes
            // With those of the running batch that its observer's subscriptions took and have
            // not passed on yet: so queued and held elsewhere add up to what counts.
            statistics.heldElsewhere = state.elsewhereEvents + max(0, state.runningEvents - notRun)
            statistics.heldElsewhereBytes = state.elsewhereBytes
            return statistics
        }
    }

    /// Runs `work` on the mailbox's queue, after what is already queued. Not bounded: for the
    /// host's own calls into module code (activate, reconfigure), which must not be dropped.
    public func perform(_ work: @escaping @Sendable () -> Void) {
        submit(.work(work))
    }

    /// Waits until everything queued before this call has been delivered, or `timeout` passed.
    /// Returns whether it drained.
    public func drain(timeout: Duration) -> Bool {
        let done = DispatchSemaphore(value: 0)
        perform { done.signal() }
        return done.wait(timeout: .now() + DispatchTimeInterval(timeout)) == .success
    }

    // MARK: Called by the bus

    func submit(_ event: Event, for subscription: SubscriptionCore) {
        let wake = state.withLock { state -> Bool in
            enqueue(event, for: subscription, in: &state)
        }
        if wake { queue.async { self.run() } }
    }

    /// Many events under one lock and with at most one wake-up: a module worker's batch.
    func submit(_ batch: [(SubscriptionCore, Event)]) {
        guard !batch.isEmpty else { return }
        let wake = state.withLock { state -> Bool in
            var wake = false
            for (subscription, event) in batch where enqueue(event, for: subscription, in: &state) { wake = true }
            return wake
        }
        if wake { queue.async { self.run() } }
    }

    /// A run of a batch's events that reach `subscription` alone (``SubscriptionCore/deliverRun``):
    /// queued under one lock, with at most one wake-up, for as long as `core` routes them here;
    /// returns how many it took. Each event queued is copied here — the mailbox keeps it.
    func submit(run events: UnsafeBufferPointer<Event>, numberedFrom first: UInt64,
                for subscription: SubscriptionCore, routedBy core: BusCore) -> Int {
        var taken = 0
        let wake = state.withLock { state -> Bool in
            var wake = false
            // No subscriber code runs meanwhile: only another thread's subscribe or cancel can
            // change the routes, and then the rest goes back to the bus to be routed anew.
            taken = forEachNumbered(events, from: first) { event in
                guard core.routeIsCurrent(for: event.name) else { return false }
                if let filter = subscription.sourceFilter, event.source != filter { return true }
                if subscription.cancelled.load(ordering: .relaxed) { return true }
                if enqueue(event, for: subscription, in: &state) { wake = true }
                return true
            }
            return wake
        }
        if wake { queue.async { self.run() } }
        return taken
    }

    /// Queues one event (or counts its drop); returns whether the queue must be woken.
    @inline(__always)
    private func enqueue(_ event: Event, for subscription: SubscriptionCore, in state: inout State) -> Bool {
        let bytes = byteCapacity == Int.max ? 0 : event.estimatedBytes
        let heldBytes = state.heldBytes + state.elsewhereBytes
        guard state.queuedEvents + state.runningEvents + state.elsewhereEvents < capacity,
              heldBytes == 0 || bytes <= byteCapacity - heldBytes else {
            state.statistics.dropped += 1
            if let open = subscription.openMailboxGap {
                open.gap.dropped += 1
                open.gap.lastSequence = event.sequence
            } else {
                let gap = MailboxGap(Gap(dropped: 1, firstSequence: event.sequence, lastSequence: event.sequence))
                subscription.openMailboxGap = gap
                state.jobs.append(.gap(subscription, gap))  // may exceed capacity: one per run of drops
            }
            return state.schedule()
        }
        subscription.openMailboxGap = nil  // later drops get a notice after this event
        state.queuedEvents += 1
        state.heldBytes += bytes
        state.jobs.append(.event(subscription, event, bytes: bytes))
        return state.schedule()
    }

    func submit(_ job: Job) {
        let wake = state.withLock { state -> Bool in
            state.jobs.append(job)
            return state.schedule()
        }
        if wake { queue.async { self.run() } }
    }

    /// Calls `observer` on the mailbox's queue after each batch of deliveries (up to 256 jobs
    /// taken under one lock), or stops calling one (`nil`). SPI for the host's forwarding to a
    /// module worker: the events of a batch are gathered by the subscriptions' sinks and sent as
    /// one frame when the batch ends, instead of one hand-over per event.
    ///
    /// The observer returns whether the queue may take its next batch. `false` *holds* the
    /// queue — it returns its thread to Dispatch and takes nothing more, while new events queue
    /// up to the mailbox's bounds and are dropped and announced past them — until whoever said
    /// `false` calls ``resumeAfterHold()``, exactly once per `false`. Why: a worker's socket
    /// that does not drain must stop the mailbox without a thread waiting for it; a Dispatch
    /// thread blocked in a write makes libdispatch start another, so a loaded machine's host
    /// grew threads (and their malloc arenas) with every stall.
    @_spi(EventBusHost) public func setBatchObserver(_ observer: (@Sendable () -> Bool)?) {
        state.withLock { $0.batchObserver = observer }
    }

    /// On the mailbox's queue, during a batch (in the batch observer, or a job of the batch):
    /// `events` of the batch's events, of `bytes` estimated bytes (0 when the mailbox has no byte
    /// bound), were passed on to where the module handles them later, and go on counting against
    /// the bounds until `releaseElsewhere(events:bytes:)`. SPI for the host's forwarding to a
    /// module worker: `mailbox_capacity` and `mailbox_bytes` bound what the module holds in all —
    /// here, on the way to its worker and in the worker's queue. The batch's other events stop
    /// counting when it ends.
    @_spi(EventBusHost) public func keepElsewhere(events: Int, bytes: Int) {
        state.withLock { state in
            state.runningEvents -= events
            state.runningBytes -= bytes
            state.heldBytes -= bytes
            state.elsewhereEvents += events
            state.elsewhereBytes += bytes
        }
    }

    /// Events kept elsewhere that the module has handled, or that are lost: they no longer count
    /// against the bounds. From any thread.
    @_spi(EventBusHost) public func releaseElsewhere(events: Int, bytes: Int) {
        state.withLock { state in
            state.elsewhereEvents -= events
            state.elsewhereBytes -= bytes
        }
    }

    /// Ends a hold the batch observer asked for (from any thread): the queue takes jobs again.
    @_spi(EventBusHost) public func resumeAfterHold() {
        let wake = state.withLock { state -> Bool in
            guard state.held else {
                state.resumedEarly = true
                return false
            }
            state.held = false
            return true  // still `scheduled`: this is the one wake-up
        }
        if wake { queue.async { self.run() } }
    }

    private func run() {
        var batch: [Job] = []
        batch.reserveCapacity(Self.batchSize)
        var observer: (@Sendable () -> Bool)?
        var turns = 0
        while true {
            if let observer, !observer() {
                let held = state.withLock { state -> Bool in
                    state.endBatch()
                    if state.resumedEarly {
                        state.resumedEarly = false
                        return false
                    }
                    state.held = true
                    return true
                }
                if held { return }
            }
            turns += 1
            if turns > Self.batchesPerTurn {
                // Still scheduled, so nothing else wakes it. Through the pool, not straight onto
                // its own queue (Dispatch would drain that on this thread at once): it goes on
                // after the queues waiting for the pool's threads, which may be as few as the CPUs.
                state.withLock { $0.endBatch() }
                let queue = self.queue
                pool.async { queue.async { self.run() } }
                return
            }
            let more = state.withLock { state -> Bool in
                observer = state.batchObserver
                state.endBatch()
                var events = 0
                defer { takenNotRun.store(events, ordering: .relaxed) }  // under the lock: statistics add both
                while batch.count < Self.batchSize, let job = state.jobs.popFirst() {
                    switch job {
                    case .event(_, _, let bytes):
                        state.runningBytes += bytes
                        events += 1
                        state.queuedEvents -= 1
                        state.statistics.delivered += 1
                    case .gap(let subscription, let gap):
                        // Closed now: the notice's counts are final once it is taken.
                        if subscription.openMailboxGap === gap { subscription.openMailboxGap = nil }
                    default: break
                    }
                    batch.append(job)
                }
                if observer != nil { state.runningEvents = events }
                if batch.isEmpty { state.scheduled = false }
                return !batch.isEmpty
            }
            guard more else { return }
            for job in batch {
                switch job {
                case .event(let subscription, let event, _):
                    takenNotRun.subtract(1, ordering: .relaxed)
                    subscription.deliverOnLane(event)
                case .gap(let subscription, let gap): subscription.deliverOnLane(gap.gap)
                case .request(let subscription, let demand): subscription.addDemand(demand)
                case .release(let subscription): subscription.release()
                case .finish(let subscription): subscription.finish()
                case .work(let work): work()
                }
            }
            batch.removeAll(keepingCapacity: true)
        }
    }
}

/// A gap notice still collecting drops. A class, so the mailbox can keep counting into the
/// notice that already waits in its queue. Guarded by the mailbox's lock.
final class MailboxGap: @unchecked Sendable {
    var gap: Gap
    init(_ gap: Gap) { self.gap = gap }
}
