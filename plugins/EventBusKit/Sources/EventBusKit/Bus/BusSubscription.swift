import Synchronization

/// The non-generic part of a bus subscription: what it matches, its demand, its bounded buffer.
///
/// Concurrency: everything but `cancelled` is owned by one serial *lane*: the bus's delivery loop
/// (see ``Bus``), or the subscription's ``Mailbox`` queue when it has one. Only that lane touches
/// demand and buffer, so there is no lock per delivery and the subscriber never sees concurrent
/// calls. `request` and `cancel` from other threads become jobs on the lane. `cancelled` is atomic
/// so a cancel is seen at once by the next delivery.
class SubscriptionCore: @unchecked Sendable {
    /// Increasing with creation: the bus delivers to subscribers in the order they subscribed.
    let id: UInt64
    let patterns: [EventPattern]
    /// Only events whose `source` is this (a shared source's id), when set.
    let sourceFilter: String?
    let lease: SourceLease?
    let bufferLimit: Int
    /// The lane of a subscription made through a mailbox-scoped bus.
    let mailbox: Mailbox?
    let cancelled = Atomic<Bool>(false)
    /// The mailbox's open gap notice for this subscription; owned by the mailbox's lock.
    var openMailboxGap: MailboxGap?
    /// Set for a subscription that joins a source which greets its joiners
    /// (``GreetsJoiningSubscribers``): none of the source's events posted to everyone reach it
    /// until its greeting completes, so what it learns first is the greeting — a snapshot that
    /// already covers what it skipped — and a snapshot reaches it once. Set before the
    /// subscription is routed (under the bus's lock); from then on only the delivery loop reads
    /// and clears it, so no run-time exclusivity check is needed.
    @exclusivity(unchecked) final var awaitingGreeting = false

    private enum Pending {
        case event(Event)
        case gap(Gap)
    }

    // Owned by the delivery loop.
    private var demand = 0  // Int.max means unlimited
    private var buffer = RingBuffer<Pending>()
    /// `buffer.count`, kept beside it: the hot path's "is anything held?" then reads an Int,
    /// which costs no run-time exclusivity check as reading the buffer struct does (one call per
    /// delivery in callgrind).
    private var heldItems = 0
    private var bufferedEvents = 0
    private var finishPending = false
    private var terminated = false

    init(id: UInt64, publisher: EventPublisher, lease: SourceLease?) {
        self.id = id
        self.patterns = publisher.patterns
        self.sourceFilter = publisher.source?.id
        self.lease = lease
        self.bufferLimit = publisher.bufferLimit
        self.mailbox = publisher.bus.mailbox
    }

    final func matches(name: String) -> Bool {
        patterns.contains { $0.matches(name) }
    }

    /// Called by the delivery loop: deliver here, or hand over to the mailbox.
    @inline(__always)
    final func deliver(_ event: Event) {
        if let sourceFilter, event.source != sourceFilter { return }
        if awaitingGreeting { return }
        deliverPastGate(event)
    }

    /// Called by the delivery loop with an event of this subscription's greeting, which passes
    /// ``awaitingGreeting``.
    final func deliverGreeting(_ event: Event) {
        deliverPastGate(event)
    }

    @inline(__always)
    private func deliverPastGate(_ event: Event) {
        if let mailbox {
            if !cancelled.load(ordering: .relaxed) { mailbox.submit(event, for: self) }
        } else {
            deliverOnLane(event)
        }
    }

    /// The batch path (``Bus/post(contentsOf:)``): takes `events`, numbered from `first`, for as
    /// long as `core` routes them here alone — it stops at another name, or once a handler
    /// subscribed or cancelled — and returns how many it took (0: it takes no run now, because it
    /// holds events, has bounded demand or awaits its greeting; then they come one by one). With
    /// a mailbox, the run goes into it under one lock.
    @inline(__always)
    final func deliverRun(_ events: UnsafeBufferPointer<Event>, numberedFrom first: UInt64, routedBy core: BusCore) -> Int {
        if awaitingGreeting { return 0 }  // one by one, through the gate of `deliver`
        if let mailbox { return mailbox.submit(run: events, numberedFrom: first, for: self, routedBy: core) }
        guard demand == Int.max, heldItems == 0, !terminated else { return 0 }
        return receive(run: events, numberedFrom: first, routedBy: core)
    }

    /// ``deliverRun(_:numberedFrom:routedBy:)`` once it is known the events can go straight to
    /// the subscriber. Overridden where a direct call saves the virtual `receive` per event.
    func receive(run events: UnsafeBufferPointer<Event>, numberedFrom first: UInt64, routedBy core: BusCore) -> Int {
        // Demand is unlimited: what the subscriber adds, or a stage's `skipped`, changes nothing.
        takeRun(events, numberedFrom: first, routedBy: core) { _ = receive($0) }
    }

    @inline(__always)
    final func takeRun(_ events: UnsafeBufferPointer<Event>, numberedFrom first: UInt64, routedBy core: BusCore,
                       _ receive: (Event) -> Void) -> Int {
        forEachNumbered(events, from: first) { event in
            guard !cancelled.load(ordering: .relaxed), core.routeIsCurrent(for: event.name) else { return false }
            if let sourceFilter, event.source != sourceFilter { return true }
            receive(event)
            return true
        }
    }

    // MARK: Called on the subscription's lane only

    @inline(__always)
    final func deliverOnLane(_ event: Event) {
        if terminated || cancelled.load(ordering: .relaxed) { return }
        if demand > 0 && heldItems == 0 {
            send(event)
        } else {
            hold(event)
        }
    }

    /// A gap the mailbox announces: goes through demand like an event, merged with one already
    /// held at the end of the buffer.
    final func deliverOnLane(_ gap: Gap) {
        if terminated || cancelled.load(ordering: .relaxed) { return }
        if demand > 0 && heldItems == 0 {
            send(gap.event)
        } else if case .gap(var held) = buffer.last {
            held.dropped += gap.dropped
            held.firstSequence = min(held.firstSequence, gap.firstSequence)
            held.lastSequence = max(held.lastSequence, gap.lastSequence)
            buffer.updateLast { $0 = .gap(held) }
        } else {
            buffer.append(.gap(gap))
            heldItems += 1
        }
    }

    final func addDemand(_ more: Int) {
        guard more > 0, !terminated else { return }
        demand = demand > Int.max - more ? Int.max : demand + more
        flush()
    }

    /// The bus finished: complete after whatever is buffered has been delivered.
    final func finish() {
        guard !terminated else { return }
        finishPending = true
        flush()
    }

    /// Cancelled: forget the subscriber and what was held for it.
    final func release() {
        terminated = true
        buffer.removeAll()
        heldItems = 0
        bufferedEvents = 0
        dropSubscriber()
    }

    private func hold(_ event: Event) {
        if bufferedEvents < bufferLimit {
            buffer.append(.event(event))
            heldItems += 1
            bufferedEvents += 1
            return
        }
        // Full: keep the oldest (order matters more than recency for an event log) and put one
        // gap notice where the dropped events would have been.
        if case .gap = buffer.last {
            buffer.updateLast { pending in
                if case .gap(var gap) = pending {
                    gap.dropped += 1
                    gap.lastSequence = event.sequence
                    pending = .gap(gap)
                }
            }
        } else {
            buffer.append(.gap(Gap(dropped: 1, firstSequence: event.sequence, lastSequence: event.sequence)))
            heldItems += 1
        }
    }

    private func flush() {
        while demand > 0, !terminated, !cancelled.load(ordering: .relaxed), let next = buffer.popFirst() {
            heldItems -= 1
            switch next {
            case .event(let event):
                bufferedEvents -= 1
                send(event)
            case .gap(let gap):
                send(gap.event)
            }
        }
        if finishPending, heldItems == 0, !terminated, !cancelled.load(ordering: .relaxed) {
            terminated = true
            receiveFinished()
        }
    }

    @inline(__always)
    private func send(_ event: Event) {
        let bounded = demand != Int.max
        if bounded { demand -= 1 }
        let more = receive(event)
        if more == SubscriptionCore.skipped {
            // A pipeline stage (``EventPipeline``'s filter, compactMap, removeDuplicates) dropped
            // it: no output, so no demand spent — as Combine's `Filter` asks upstream for one more.
            if bounded { demand += 1 }
            return
        }
        if more > 0 { addDemand(more) }
    }

    /// What `receive(_:)` returns when a pipeline stage dropped the event (it reached nobody).
    static let skipped = -1

    /// `demand`, as the count ``BusCore/request(_:_:)`` adds (`Int.max`: unlimited), for every
    /// subscriber that asks a bus subscription — directly, through a pipeline's stages or through
    /// an OpenCombine operator that hands the bus subscription on (`Filter`, `Map`, `CompactMap`).
    ///
    /// `.none` traps: asking for nothing is a subscriber's bug, and Combine treats it as one —
    /// its subjects and its operators with a subscription of their own fail the precondition
    /// "demand must not be zero" (OpenCombine's `PassthroughSubject`, `RemoveDuplicates`,
    /// `CollectByCount`, … too). Trapping here, on the caller's thread, makes every path to a bus
    /// publisher say so the same way, where ignoring it would leave the subscriber waiting for
    /// events it never asked for on some paths and trap on others.
    static func requested(_ demand: Subscribers.Demand, by subscriber: Any.Type) -> Int {
        if demand == .none {
            fatalError("\(subscriber) requested .none from a bus publisher: demand must be greater than zero")
        }
        return demand.max ?? Int.max
    }

    // MARK: Implemented by the generic subclass

    /// Hands `event` to the subscriber; returns the demand it added (`Int.max`: unlimited) or
    /// ``skipped``.
    func receive(_ event: Event) -> Int { fatalError("abstract") }
    func receiveFinished() { fatalError("abstract") }
    func dropSubscriber() { fatalError("abstract") }
}

/// The Combine face of a bus subscription.
final class BusSubscription<Downstream: Subscriber>: SubscriptionCore, Subscription, @unchecked Sendable
where Downstream.Input == Event, Downstream.Failure == Never {
    private let core: BusCore
    private var downstream: Downstream?

    init(core: BusCore, downstream: Downstream, id: UInt64, publisher: EventPublisher, lease: SourceLease?) {
        self.core = core
        self.downstream = downstream
        super.init(id: id, publisher: publisher, lease: lease)
    }

    override func receive(_ event: Event) -> Int {
        // A local copy: the subscriber may cancel from inside `receive`, which releases `downstream`.
        guard let downstream else { return 0 }
        return downstream.receive(event).max ?? Int.max
    }

    override func receiveFinished() {
        guard let downstream else { return }
        self.downstream = nil
        downstream.receive(completion: .finished)
    }

    override func dropSubscriber() {
        downstream = nil
    }

    func request(_ demand: Subscribers.Demand) {
        core.request(self, SubscriptionCore.requested(demand, by: Downstream.self))
    }

    func cancel() {
        core.cancel(self)
    }

    var combineIdentifier: CombineIdentifier { CombineIdentifier(self) }
}

/// A bus subscription that calls a closure: what `bus.publisher(for:).sink { }` builds.
///
/// Why it exists: a plain OpenCombine `Sink` takes a lock on every value and is reached through
/// generic witness tables; the bus already serializes deliveries, so a direct sink can skip both
/// (docs/platform-facts.md, Delivery costs measured these as most of OpenCombine's per-delivery cost). Semantics are those
/// of `Sink`: unlimited demand, a completion handler, cancelled by its `AnyCancellable`.
///
/// The closures are `let`, so calling one costs no retain. Cycles (a closure capturing the
/// object that stores the cancellable) are still broken on cancel and on completion: the
/// cancellable holds this subscription through its ``SinkHandle``, which lets go of it when it
/// ends, and once the bus lets go of it too, it is freed with its closures. Nothing reaches the
/// closures after that: `deliver` checks `terminated` first.
final class ClosureSubscription: SubscriptionCore, @unchecked Sendable {
    private let receiveValue: (Event) -> Void
    private let receiveCompletion: (Subscribers.Completion<Never>) -> Void
    /// What the sink's `AnyCancellable` holds.
    let handle = SinkHandle()

    init(id: UInt64, publisher: EventPublisher, lease: SourceLease?,
         receiveCompletion: @escaping (Subscribers.Completion<Never>) -> Void,
         receiveValue: @escaping (Event) -> Void) {
        self.receiveValue = receiveValue
        self.receiveCompletion = receiveCompletion
        super.init(id: id, publisher: publisher, lease: lease)
        handle.hold(self)
    }

    override func receive(_ event: Event) -> Int {
        receiveValue(event)
        return 0
    }

    override func receive(run events: UnsafeBufferPointer<Event>, numberedFrom first: UInt64, routedBy core: BusCore) -> Int {
        takeRun(events, numberedFrom: first, routedBy: core) { receiveValue($0) }
    }

    override func receiveFinished() {
        receiveCompletion(.finished)
        _ = handle.take()
    }

    /// Released after a cancel, which came through the handle and took it already.
    override func dropSubscriber() {}
}

/// What the `AnyCancellable` of a bus sink holds: its subscription, until cancelled or ended.
///
/// Why not a weak reference to the subscription: a weak reference gives an object a side table,
/// and every retain and release of it then takes the runtime's slow path — one pair for each
/// event a mailbox queues for it, about a quarter of cross-thread delivery (docs/benchmarks.md).
/// The subscription takes itself back from the handle when it ends, so a cancellable kept
/// longer holds nothing but this.
final class SinkHandle: Sendable {
    private let subscription = Mutex<ClosureSubscription?>(nil)

    func hold(_ held: ClosureSubscription) {
        subscription.withLock { $0 = held }
    }

    /// The subscription, if it is still held; it is not held after this.
    func take() -> ClosureSubscription? {
        subscription.withLock { held in
            defer { held = nil }
            return held
        }
    }
}
