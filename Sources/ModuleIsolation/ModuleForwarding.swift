import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import Synchronization

/// The subscriptions the host holds on a process-isolated module's behalf, and the forwarding of
/// their events to whichever worker runs the module now.
///
/// Why it outlives a worker: when a worker crashes, its subscriptions stay on the host bus and
/// the module's mailbox is *held*, so the events posted while the module waits for its restart
/// queue up within the mailbox's bounds (past them they are dropped, counted and announced as
/// gaps, as for any full mailbox). The restarted worker subscribes anew; each of its
/// subscriptions whose patterns and source equal one the host still holds *adopts* it, in the
/// order they were made: the host's subscription stays, only the id its events are tagged with
/// changes. Once the module is active again the mailbox resumes, and the adopted subscriptions'
/// events reach the new worker in order, each once, with no cut to place: it is the same host
/// subscription throughout. A held subscription that no new one adopts is retired: its queued
/// events are counted as discarded (the module no longer asks for them) and it is cancelled. A
/// new subscription that adopts none starts when it is made, like any subscription.
///
/// Events the crashed worker had been sent are not sent again: the event it died on is among
/// them, and the host cannot tell which one it was, so sending them again could crash the module
/// again and again. They are counted as lost (`module.crashed`'s `lost`).
///
/// The mailbox's bounds hold for everything the module holds, wherever it is: an event that
/// leaves the mailbox for the worker — kept here while no worker runs, on its way, in the
/// worker's queue — goes on counting against them (``Mailbox/keepElsewhere(events:bytes:)``)
/// until the worker reports it handled (``settle(worker:handled:)``), or it is lost with the
/// worker or the module. So past `mailbox_capacity` events (or `mailbox_bytes`) held in all,
/// the mailbox drops, counts and announces, as for a module inside eventbusd. Its gap notices
/// are merged here as they would be in a mailbox the module has not got to: a subscription's
/// notice waits until the worker has handled everything it was sent, or goes just before the
/// subscription's next event, and the drops meanwhile are added to it — so a stalled module
/// gets one notice per run of drops, not one per drop in its worker's queue.
///
/// ## Threads
/// - The **module's mailbox queue** runs the held subscriptions' sinks (``forward(_:through:)``)
///   and the batch observer, which sends each batch's frame to the attached worker — or, when
///   none is attached, keeps the batch and holds the mailbox.
/// - The attached worker's **session reader thread** makes and cancels subscriptions
///   (``subscribe(worker:id:spec:)``, ``cancel(worker:id:)``) and reports what the module
///   handled (``settle(worker:handled:)``); for an exec module, the **channel's writer** does
///   (or the mailbox queue, when it writes itself), as it takes the events for the program.
/// - The **supervisor queue** detaches a crashed worker, attaches a started one and discards
///   everything when the module stops or gives up.
/// What they share is guarded by `condition`; the batch being gathered is the mailbox queue's.
final class ModuleForwarding: @unchecked Sendable {
    typealias Weight = InFlightLedger.Weight

    /// One subscription made on the host bus for a worker.
    final class Relay: @unchecked Sendable {
        /// The worker's subscribe request without its id: what a later worker's must equal to adopt it.
        let spec: JSON
        /// The worker's id for it, which tags its events; changed only while the mailbox is held.
        let wireID: Atomic<UInt64>
        /// The worker that made or adopted it (``beginWorker()``'s number); under `condition`.
        var owner: Int
        /// Set when no restarted worker adopted it: its events are counted, not sent.
        let retired = Atomic<Bool>(false)
        var cancellable: AnyCancellable?

        init(spec: JSON, wireID: UInt64, owner: Int) {
            self.spec = spec
            self.wireID = Atomic(wireID)
            self.owner = owner
        }
    }

    private enum Mode {
        /// No worker and nothing held: batches pass (there are none without subscriptions).
        case idle
        /// A worker is starting or has crashed: batches are kept and the mailbox held.
        case parking
        case attached(WorkerSession)
    }

    /// An event kept while no worker could take it.
    private struct Parked {
        var relay: Relay
        var event: Event
        var weight: Weight
    }

    private let mailbox: Mailbox
    /// Scoped to the module's mailbox.
    private let moduleBus: Bus
    private let log: ModuleLog
    /// The mailbox bounds bytes, so events are weighed (as the mailbox weighs them).
    private let weighsBytes: Bool
    private let condition = NSCondition()
    private var mode = Mode.idle
    private var relays: [Relay] = []
    private var workers = 0
    /// This forwarding's batch observer held the mailbox and owes it a resume.
    private var held = false
    /// Events of batches gathered while no worker could take them, in order.
    private var parked: [Parked] = []
    /// What the attached worker was sent and has not reported handled.
    private var inFlight = InFlightLedger()
    /// Events that reached a retired subscription.
    private let discarded = Atomic<UInt64>(0)

    // The mailbox queue's.
    private var batch = FrameBuffer()
    /// The relay each of the batch's events came through, and its weight, in order: whom
    /// ``park()`` keeps them for. Not found again by the id in the frame among `relays`, which
    /// lists a relay only once its subscription is made — and a subscription's first events can
    /// end a batch before that: a running shared source greets a joiner from its own thread at
    /// once (a device snapshot).
    private var batchItems: [(relay: Relay, weight: Weight)] = []
    /// The batch's weight, in all.
    private var batchWeight = Weight()
    /// Each subscription's gap notice not sent yet, with the drops since merged into it.
    private var pendingGaps: [ObjectIdentifier: (relay: Relay, gap: Gap)] = [:]
    /// `pendingGaps` is not empty: read by the reader thread, to wake the mailbox queue when the
    /// worker has handled everything it was sent.
    private let gapsPending = Atomic<Bool>(false)

    init(mailbox: Mailbox, hostBus: Bus, log: ModuleLog) {
        self.mailbox = mailbox
        self.moduleBus = hostBus.scoped(to: mailbox)
        self.log = log
        self.weighsBytes = mailbox.byteCapacity != Int.max
        mailbox.setBatchObserver { [weak self] in self?.batchEnded() ?? true }
    }

    // MARK: The supervisor queue

    /// A new worker is about to start: its number, for its subscriptions. Until it is attached,
    /// batches are kept and the mailbox held.
    func beginWorker() -> Int {
        condition.withLock {
            workers += 1
            if case .attached = mode {} else { mode = .parking }
            return workers
        }
    }

    /// The worker's session (its channel already closed) is let go: from now on the mailbox is
    /// held, and this returns once it is (at most one batch later). Returns the events the worker
    /// was sent and had not reported handled, which are lost with it.
    @discardableResult
    func detach() -> UInt64 {
        let wasHeld = condition.withLock {
            mode = .parking
            return held
        }
        if !wasHeld {
            mailbox.perform {}  // a batch ends after it, whose observer holds the mailbox
            let deadline = Date().addingTimeInterval(10)
            condition.withLock {
                while !held { if !condition.wait(until: deadline) { break } }
            }
        }
        // Once held, no batch is on its way to the worker: what it was sent is all listed.
        let lost = condition.withLock { inFlight.removeAll() }
        release(lost)
        return UInt64(lost.events)
    }

    /// What ``attach(_:worker:retiring:)`` handed over.
    struct Handover {
        /// Events kept while no worker ran, sent to the new one first.
        var carried: Int
        /// Events waiting in the held mailbox, which now goes on.
        var queued: Int
        /// Held subscriptions the new worker did not make again: retired.
        var retired: Int
    }

    /// The started worker `worker` takes over: subscriptions it did not adopt are retired, what
    /// was kept is sent to it, then the mailbox goes on.
    ///
    /// Without `retiring`, the subscriptions it did not adopt stay and their events go to it —
    /// for an exec module, whose program subscribes after it started (after its `hello`), can
    /// only add subscriptions, and restarted is the same program with the same config: it
    /// adopts them as it makes them again (``subscribe(worker:id:spec:)`` adopts a held one at
    /// any time), and until then their events still reach it.
    func attach(_ session: WorkerSession, worker: Int, retiring: Bool = true) -> Handover {
        let (carried, retired, wasHeld, letGo) = condition.withLock { () -> ([Parked], [Relay], Bool, Weight) in
            mode = .attached(session)
            let retired = retiring ? relays.filter { $0.owner != worker } : []
            if retiring { relays.removeAll { $0.owner != worker } }
            for relay in retired { relay.retired.store(true, ordering: .relaxed) }
            // Events kept for a subscription the worker cancelled meanwhile are let go, as the
            // worker drops what comes for a cancelled one: its id may name another one by now.
            let listed = Set(relays.map(ObjectIdentifier.init))
            var carried: [Parked] = []
            var letGo = Weight()
            var retiredEvents: UInt64 = 0
            for item in parked {
                if item.relay.retired.load(ordering: .relaxed) {
                    retiredEvents += 1
                    letGo += item.weight
                } else if listed.contains(ObjectIdentifier(item.relay)) {
                    carried.append(item)
                } else {
                    letGo += item.weight
                }
            }
            discarded.add(retiredEvents, ordering: .relaxed)
            // The new worker counts what it handled from zero, the carried events first.
            inFlight = InFlightLedger()
            _ = inFlight.append(carried.map(\.weight))
            defer {
                parked = []
                held = false
            }
            return (carried, retired, held, letGo)
        }
        release(letGo)
        if !carried.isEmpty {
            var frame = FrameBuffer()
            for item in carried {
                frame.appendEvent(item.event, type: .events, subscription: item.relay.wireID.load(ordering: .relaxed))
            }
            // Closed: the worker is gone already, and its end detaches it (they are lost with it).
            session.channel.send { $0.append(contentsOf: &frame) }
        }
        let queued = mailbox.statistics.queued
        if wasHeld { mailbox.resumeAfterHold() }
        if !retired.isEmpty {
            // After what is queued for them, which is counted as discarded on the way.
            mailbox.perform { [self] in
                for relay in retired { relay.cancellable?.cancel() }
                let count = discarded.exchange(0, ordering: .relaxed)
                if count > 0 {
                    log.notice("\(count) event(s) held for \(retired.count) subscription(s) the restarted module did not make again were discarded")
                }
            }
        }
        return Handover(carried: carried.count, queued: queued, retired: retired.count)
    }

    /// Cancels every subscription held for the module and lets the mailbox go on: the module is
    /// stopped or has given up. Returns the events that were waiting for it, now lost: those kept
    /// while no worker ran, those sent to a worker and not reported handled (none after
    /// ``detach()``) and those in the mailbox. Exact when the mailbox is held (after
    /// ``detach()``, or while waiting for a restart): nothing moves meanwhile.
    @discardableResult
    func discardAll() -> UInt64 {
        let (all, kept, sent, wasHeld) = condition.withLock { () -> ([Relay], [Parked], Weight, Bool) in
            mode = .idle
            defer {
                relays = []
                parked = []
                held = false
            }
            return (relays, parked, inFlight.removeAll(), held)
        }
        // Cancelled first, so that what the mailbox holds is all that comes for them.
        for relay in all {
            relay.retired.store(true, ordering: .relaxed)
            relay.cancellable?.cancel()
        }
        var lost = sent
        for item in kept { lost += item.weight }
        release(lost)
        let queued = mailbox.statistics.queued
        if wasHeld { mailbox.resumeAfterHold() }
        return UInt64(lost.events + queued)
    }

    /// On the mailbox queue (in a drain before a deactivate): sends the batch gathered so far.
    func flushNow() { _ = batchEnded() }

    // MARK: The session reader thread

    /// The worker `worker` subscribed (`spec`: its request). Adopts a held subscription with the
    /// same request that no worker since the crash has adopted, or subscribes anew.
    func subscribe(worker: Int, id: UInt64, spec: JSON) throws {
        var request = spec
        if case .object(var fields) = spec {
            fields["id"] = nil
            request = .object(fields)
        }
        let adopted = condition.withLock { () -> Bool in
            guard let relay = relays.first(where: { $0.owner != worker && $0.spec == request }) else { return false }
            relay.owner = worker
            relay.wireID.store(id, ordering: .relaxed)
            return true
        }
        if adopted { return }
        let patterns = try (spec["patterns"]?.arrayValue ?? []).map { try EventPattern($0.stringValue ?? "") }
        let publisher = try spec["source"].map { try SourceSpec.publisher(on: moduleBus, patterns: patterns, spec: $0) }
            ?? moduleBus.publisher(for: patterns)
        let relay = Relay(spec: request, wireID: id, owner: worker)
        relay.cancellable = publisher.sink { [weak self] event in self?.forward(event, through: relay) }
        condition.withLock { relays.append(relay) }
    }

    func cancel(worker: Int, id: UInt64) {
        let relay = condition.withLock { () -> Relay? in
            guard let index = relays.firstIndex(where: { $0.owner == worker && $0.wireID.load(ordering: .relaxed) == id }) else { return nil }
            return relays.remove(at: index)
        }
        relay?.cancellable?.cancel()
    }

    /// The worker `worker` has handled `handled` of the items it was sent (events and gap
    /// notices, counted from its start): they no longer count against the mailbox's bounds. A
    /// report of a worker no longer attached is too late: what it held was counted as lost.
    func settle(worker: Int, handled: UInt64) {
        let (released, caughtUp) = condition.withLock { () -> (Weight, Bool) in
            guard case .attached(let session) = mode, session.worker == worker else { return (Weight(), false) }
            return (inFlight.settle(handled: handled), inFlight.isEmpty)
        }
        release(released)
        // A batch ends after it, which sends the gap notices that waited.
        if caughtUp, gapsPending.load(ordering: .relaxed) { mailbox.perform {} }
    }

    // MARK: The mailbox queue

    /// Gathered into the batch's frame.
    private func forward(_ event: Event, through relay: Relay) {
        if relay.retired.load(ordering: .relaxed) {
            discarded.add(1, ordering: .relaxed)
            return
        }
        // The mailbox's gap notice (never numbered): merged with the one that waits, if any.
        if event.sequence == 0, let gap = event.gap {
            let key = ObjectIdentifier(relay)
            if let waiting = pendingGaps[key]?.gap {
                pendingGaps[key]!.gap = Gap(dropped: waiting.dropped + gap.dropped, firstSequence: waiting.firstSequence,
                                            lastSequence: gap.lastSequence)
            } else {
                pendingGaps[key] = (relay, gap)
                gapsPending.store(true, ordering: .relaxed)
            }
            return
        }
        if !pendingGaps.isEmpty, let waiting = pendingGaps.removeValue(forKey: ObjectIdentifier(relay)) {
            appendGap(waiting.gap, for: relay)
        }
        batch.appendEvent(event, type: .events, subscription: relay.wireID.load(ordering: .relaxed))
        let weight = Weight(events: 1, bytes: weighsBytes ? event.estimatedBytes : 0)
        batchItems.append((relay, weight))
        batchWeight += weight
    }

    /// A gap notice, in the batch: no event, so it weighs nothing (as in the mailbox).
    private func appendGap(_ gap: Gap, for relay: Relay) {
        batch.appendEvent(gap.event, type: .events, subscription: relay.wireID.load(ordering: .relaxed))
        batchItems.append((relay, Weight()))
    }

    /// The worker has handled all it was sent: the notices that waited go with this batch, as
    /// a mailbox hands a notice over once its module gets to it.
    private func appendPendingGaps() {
        for (relay, gap) in pendingGaps.values where !relay.retired.load(ordering: .relaxed) {
            appendGap(gap, for: relay)
        }
        pendingGaps.removeAll()
        gapsPending.store(false, ordering: .relaxed)
    }

    /// When the mailbox's batch ends (and before a drain reports done): the gathered events go to
    /// the attached worker's socket as one frame — written right here when no write is in
    /// progress and the socket takes them. Returns whether the mailbox may go on; false holds it
    /// until the channel's writer has taken what waits, or until a worker is attached.
    private func batchEnded() -> Bool {
        condition.lock()
        switch mode {
        case .idle:
            condition.unlock()
            // Gathered while the module stopped: nothing is sent, nothing kept.
            clearBatch()
            return true
        case .parking:
            keepBatch()
            park()
            condition.unlock()
            return false
        case .attached(let session):
            let caughtUp = inFlight.isEmpty
            condition.unlock()
            if caughtUp, !pendingGaps.isEmpty { appendPendingGaps() }
            guard !batchItems.isEmpty else { return true }
            // Kept before the worker can report them handled.
            keepBatch()
            let mailbox = self.mailbox
            let outcome = session.channel.sendOrHold({ pending in pending.append(contentsOf: &batch) },
                                                     whenDrained: { mailbox.resumeAfterHold() })
            condition.lock()
            guard outcome != .closed else {
                // The worker is gone; the supervisor detaches it soon.
                park()
                condition.unlock()
                return false
            }
            var released = Weight()
            if case .idle = mode {
                // The module stopped meanwhile: they went to a worker that is being ended.
                for item in batchItems { released += item.weight }
            } else {
                released = inFlight.append(batchItems.map(\.weight))
            }
            condition.unlock()
            release(released)
            clearBatch()
            return outcome != .held
        }
    }

    /// The batch's events go on counting against the mailbox's bounds after the batch ends.
    private func keepBatch() {
        if batchWeight != Weight() { mailbox.keepElsewhere(events: batchWeight.events, bytes: batchWeight.bytes) }
        batchWeight = Weight()
    }

    private func clearBatch() {
        batch.removeAll()
        batchItems.removeAll(keepingCapacity: true)
        batchWeight = Weight()
    }

    /// Under `condition`, on the mailbox queue: keeps the gathered events, each with the relay it
    /// came through, and notes the hold that the caller's `false` makes.
    private func park() {
        if !batchItems.isEmpty {
            var next = 0  // in `batchItems`: the item of the next event
            var kept = Weight()
            batch.bytes.withUnsafeBytes { raw in
                var offset = 0
                while offset + 5 <= raw.count {
                    let length = Int(raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self).littleEndian)
                    var decoder = WireDecoder(UnsafeRawBufferPointer(rebasing: raw[(offset + 5)..<(offset + 4 + length)]))
                    offset += 4 + length
                    guard let count = try? decoder.integer(UInt32.self) else { continue }
                    let end = next + Int(count)
                    defer { next = end }
                    while next < end {
                        guard (try? decoder.integer(UInt64.self)) != nil, let event = try? decoder.event() else { break }
                        let item = batchItems[next]
                        next += 1
                        if !item.relay.retired.load(ordering: .relaxed) {
                            parked.append(Parked(relay: item.relay, event: event, weight: item.weight))
                            kept += item.weight
                        }
                    }
                }
            }
            // Those of retired subscriptions are not kept.
            var gathered = Weight()
            for item in batchItems { gathered += item.weight }
            release(Weight(events: gathered.events - kept.events, bytes: gathered.bytes - kept.bytes))
            clearBatch()
        }
        held = true
        condition.broadcast()
    }

    /// Events (and bytes) no longer held for the module: handled, or lost.
    private func release(_ weight: Weight) {
        if weight != Weight() { mailbox.releaseElsewhere(events: weight.events, bytes: weight.bytes) }
    }
}
