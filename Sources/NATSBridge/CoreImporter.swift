import CNATS
@_spi(EventBusHost) import EventBusKit
import Foundation
import Synchronization
import SystemCalls

/// Core-mode imports: one nats.c subscription per import pattern (`<prefix>.*.<pattern>`), so
/// the server filters by name; each message is taken, decoded and posted by nats.c's delivery
/// thread of that subscription — the thread that posts imports into the bus.
///
/// A fair share per origin: the message callback only routes a message (``ImportRoutes``) and
/// reads its numbers, and holds it in its origin's queue (``OriginShares``); after it, while
/// nats.c holds further messages, up to ``sortLimit`` are taken in before any is posted, then up
/// to ``ImportBatch/countLimit`` are decoded taking one of each origin in turn. A peer flooding
/// the subject fills its own queue, and its excess is dropped and counted against it
/// (`over_share`); nats.c's queue, shared by all origins, stays near empty, so its pending limits
/// (which drop whatever comes) are reached only when taking messages out cannot keep up.
///
/// Posting in batches: decoded events are posted together (`Bus.post(contentsOf:)`, one
/// compare-and-swap or lock for all of them) at the end of each serving, or when the batch holds
/// ``ImportBatch/countLimit`` events or ``ImportBatch/byteLimit`` bytes. An event alone — the
/// paced case — is posted by its own callback, so batching adds no latency. The order of each
/// origin's messages is kept; echoes and skipped names never enter. When the subscription closes,
/// nats.c's completion callback posts what is left on the same thread.
///
/// Exactly once per host, in this mode's at-most-once terms:
/// - the host's own events come back under `*` and are dropped here (counted as echoes): NATS
///   subject filters cannot say "any host but this one";
/// - a name matched by two import patterns reaches both subscriptions; only the subscription of
///   the first pattern that matches posts it.
///
/// Slow-consumer drops (nats.c's pending limits, ``handOffLimit`` and ``handOffBytes``) are read
/// per subscription by the monitor (``poll()``) and announced as `bridge.gap` (`slow_consumer`)
/// with exact counts.
///
/// Bytes: what a subscription holds is bounded — the origin queues by `pending_limit` and
/// `pending_bytes`, nats.c's hand-off queue by ``handOffLimit`` and ``handOffBytes``, the
/// batch being gathered by
/// ``ImportBatch/byteLimit``, the routes by
/// ``ImportRoutes/bytesLimit`` (each route's payload shape keeps keys, not values: see
/// ``WireFormat/ShapeCache``).
final class CoreImporter: @unchecked Sendable {
    // @unchecked: `subscriptions` is set in `start` and cleared in `stop` (bridge control
    // queue); the message callbacks read immutable state and the Sendable bus/counters, and
    // change only their own subscription's batch and routes (its delivery thread's alone).

    /// One import subscription: what its nats.c delivery thread works on, and that thread's
    /// work (``take(_:handle:)``, ``serve(unlessMoreWaitIn:)``). It holds what that work needs
    /// itself, not through the importer: nats.c's callbacks reach it by a pointer kept for good,
    /// and reading an unowned importer cost a reference-count check per message.
    final class Subscription {
        let index: Int
        let filter: String
        var handle: OpaquePointer?
        var dropped: Int64 = 0
        /// Of nats.c's drops for this subscription, how many a jump in the numbers has already
        /// been put down to (``countMissed(_:of:handle:)``; delivery thread).
        var dropsExplained: Int64 = 0
        /// Decoded events not posted yet, in arrival order: touched only on this subscription's
        /// delivery thread (nats.c runs the completion callback there too, after the last message),
        /// so the run-time exclusivity check of each access is left out.
        @exclusivity(unchecked) var batch = ImportBatch()
        /// Messages taken out of nats.c, per origin, not yet decoded (delivery thread).
        let shares: OriginShares
        /// Messages taken in since the held ones were last served (delivery thread).
        @exclusivity(unchecked) var taken = 0
        /// Whether nats.c's delivery thread has been given the importer's name, as the durable
        /// importer's thread has: `top -H` and profiles then say which thread imports.
        @exclusivity(unchecked) private var threadNamed = false
        /// `shares.count` as of the last serving, for the monitor's import lag.
        let held = Atomic<Int>(0)
        /// Signalled by nats.c's completion callback, once the last batch is posted.
        let completed = DispatchSemaphore(value: 0)
        /// Routes by subject, touched only on this subscription's delivery thread: a message on
        /// a known subject costs no String and no pattern matching.
        let routes: ImportRoutes
        private let bus: Bus
        private let counters: BridgeCounters
        private let gaps: GapBook

        init(index: Int, filter: String, importer: CoreImporter) {
            self.index = index
            self.filter = filter
            self.routes = ImportRoutes(subjects: importer.subjects, patterns: importer.patterns, patternIndex: index)
            self.shares = OriginShares(countLimit: importer.pendingLimit, bytesLimit: importer.pendingBytes)
            self.bus = importer.bus
            self.counters = importer.counters
            self.gaps = importer.gaps
        }
    }

    private let client: NATSClient
    private let bus: Bus
    private let subjects: Subjects
    private let patterns: [EventPattern]
    private let counters: BridgeCounters
    private let gaps: GapBook
    private let pendingLimit: Int
    private let pendingBytes: Int
    private var subscriptions: [Subscription] = []

    init(client: NATSClient, bus: Bus, subjects: Subjects, patterns: [EventPattern], counters: BridgeCounters,
         gaps: GapBook, pendingLimit: Int, pendingBytes: Int) {
        self.client = client
        self.bus = bus
        self.subjects = subjects
        self.patterns = patterns
        self.counters = counters
        self.gaps = gaps
        self.pendingLimit = pendingLimit
        self.pendingBytes = pendingBytes
    }

    var filters: [String] { patterns.map(subjects.filter(for:)) }

    /// Subscribes (nats.c sends the subscriptions once connected and again after every
    /// reconnect).
    func start() throws(BridgeError) {
        for (index, pattern) in patterns.enumerated() {
            let subscription = Subscription(index: index, filter: subjects.filter(for: pattern), importer: self)
            var handle: OpaquePointer?
            let closure = Unmanaged.passRetained(subscription).toOpaque()  // kept for good: a callback may run during stop
            let status = natsConnection_Subscribe(&handle, client.connection, subscription.filter, { _, handle, message, closure in
                let subscription = Unmanaged<Subscription>.fromOpaque(closure!).takeUnretainedValue()
                subscription.take(message!, handle: handle)
                subscription.serve(unlessMoreWaitIn: handle)
            }, closure)
            try BridgeError.check(status, .connection, "subscribe to \(subscription.filter)")
            try BridgeError.check(natsSubscription_SetOnCompleteCB(handle, { closure in
                let subscription = Unmanaged<Subscription>.fromOpaque(closure!).takeUnretainedValue()
                subscription.serve(unlessMoreWaitIn: nil)
                subscription.completed.signal()
            }, closure), .connection, "completion callback")
            try BridgeError.check(natsSubscription_SetPendingLimits(handle, Int32(clamping: max(pendingLimit, Self.handOffLimit)),
                                                                    Int32(clamping: max(pendingBytes, Self.handOffBytes))),
                                  .connection, "pending limits")
            subscription.handle = handle
            subscriptions.append(subscription)
        }
        // When connected, a round trip makes sure the server has the subscriptions before
        // `start` returns: events other hosts publish from then on are received.
        if client.state == .connected { _ = natsConnection_FlushTimeout(client.connection, 2_000) }
    }

    /// nats.c's queue of a subscription is only a hand-off to the origin queues, which
    /// `pending_limit` and `pending_bytes` bound: it is drained at once, message by message, and
    /// holds what arrives while the bus takes a few events (``serveStep``). Its limits (nats.c's
    /// defaults, or the configured ones when larger) are a backstop for a peer faster than
    /// taking messages out — past them nats.c drops whatever comes, of any origin
    /// (`slow_consumer`) — and must not be reached by a burst that the origin queues would sort.
    static let handOffLimit = 65_536
    static let handOffBytes = 64 << 20

    /// Events decoded between two looks at nats.c while serving: when more messages came
    /// meanwhile, they are taken in first. Serving takes as long as the bus's subscribers do,
    /// and what arrives meanwhile waits in nats.c's queue, shared by all origins.
    static let serveStep = 16
    /// Or payload bytes: a large event costs the bus (and each tail) in proportion to its size.
    static let serveStepBytes = 256 << 10

    /// The messages taken in from nats.c before the held ones are served, while nats.c holds
    /// more: enough that a flood's backlog is seen in the origin queues rather than in nats.c
    /// (which drops whatever arrives), few enough that a burst's first event waits well under a
    /// millisecond for its post.
    static let sortLimit = 1_024

    /// Monitor queue: announces new slow-consumer drops; returns the messages waiting in nats.c
    /// and in the origin queues (the import lag).
    func poll() -> UInt64 {
        var waiting: UInt64 = 0
        for subscription in subscriptions {
            guard let handle = subscription.handle else { continue }
            var dropped: Int64 = 0
            if natsSubscription_GetDropped(handle, &dropped) == NATS_OK, dropped > subscription.dropped {
                gaps.record(.slowConsumer, count: Int(dropped - subscription.dropped), subject: subscription.filter)
                subscription.dropped = dropped
            }
            var messages: Int32 = 0
            var bytes: Int32 = 0
            if natsSubscription_GetPending(handle, &messages, &bytes) == NATS_OK { waiting += UInt64(max(0, messages)) }
            waiting += UInt64(max(0, subscription.held.load(ordering: .relaxed)))
        }
        return waiting
    }

    /// Unsubscribes, and waits (at most `timeout` per subscription) until nats.c's completion
    /// callback has posted the subscription's last batch: then no callback runs any more.
    func stop(timeout: Duration = .seconds(2)) {
        for subscription in subscriptions {
            guard let handle = subscription.handle else { continue }
            natsSubscription_Unsubscribe(handle)
            _ = subscription.completed.wait(timeout: .now() + DispatchTimeInterval(timeout))
            natsSubscription_Destroy(handle)
            subscription.handle = nil
        }
    }

    deinit {
        _ = subscriptions  // the callbacks' closures live as long as the importer
    }
}

extension CoreImporter.Subscription {
    /// nats.c's delivery thread: routes a message and counts what its numbers
    /// say was missed before it, then holds it in its origin's queue (``OriginShares``) or frees
    /// it (an echo, a name another subscription posts, a subject refused). No decoding here:
    /// taking a message out of nats.c must cost far less than posting it, or nats.c's pending
    /// limits would drop whatever comes, of any origin.
    func take(_ message: OpaquePointer, handle: OpaquePointer?) {
        if !threadNamed {
            threadNamed = true
            System.nameCurrentThread("eventbus.import")
        }
        let route = routes.route(natsMsg_GetSubject(message))
        switch route.action {
        case .post: break
        case .echo:
            counters.echoesDropped.add(1, ordering: .relaxed)
            return free(message)
        case .skip: return free(message)
        case .refused:
            refuse(route.refusal?.subject ?? "?", route.refusal?.reason ?? "refused")
            return free(message)
        }
        let length = Int(natsMsg_GetDataLength(message))
        guard let data = natsMsg_GetData(message) else {
            refuse(route.name, "no payload")
            return free(message)
        }
        // Numbers count in arrival order, whether the message is posted, refused later or
        // dropped over its origin's share (then it is counted as that, not as missed).
        if let header = try? WireFormat.header(UnsafeRawBufferPointer(start: data, count: length)) {
            let missed = route.received.receive(instance: header.instance, number: header.number)
            if missed > 0 { countMissed(missed, of: route, handle: handle) }
        }
        shares.append(OriginShares.Held(message: message, route: route, bytes: length)) { dropped, origin in
            gaps.record(.overShare, count: 1, subject: dropped.route.name, origin: origin)
            free(dropped.message)
        }
    }

    /// Decodes a held message into the batch and frees it (its origin's turn; delivery thread).
    private func decode(_ held: OriginShares.Held) {
        defer { free(held.message) }
        let route = held.route
        let payload = UnsafeRawBufferPointer(start: natsMsg_GetData(held.message), count: held.bytes)
        var header = WireFormat.Header(instance: 0, sequence: 0)
        do {
            batch.append(try WireFormat.decode(payload, name: route.name, host: route.host, shapes: route.shapes, header: &header),
                                      bytes: held.bytes)
        } catch {
            refuse(route.name, "payload from \(route.host): \(error.description)")
        }
    }

    /// Frees a message taken from nats.c on its delivery thread, not through `natsMsg_Destroy`
    /// (see shim.h): it is ours, and nats.c's delivery loop does not touch it after its callback.
    private func free(_ message: OpaquePointer) {
        natsMsg_free(UnsafeMutableRawPointer(message))
    }

    /// nats.c's delivery thread: `count` exports of `route`'s origin and name
    /// came not. Those nats.c dropped for this subscription (its pending limits) are announced
    /// exactly as `slow_consumer` by ``poll()``: as many of `count` as nats.c has dropped since
    /// and not yet explained a jump are theirs; the rest is announced as `missed`.
    private func countMissed(_ count: UInt64, of route: ImportRoutes.Route, handle: OpaquePointer?) {
        var missed = Int64(clamping: count)
        var dropped: Int64 = 0
        if let handle, natsSubscription_GetDropped(handle, &dropped) == NATS_OK, dropped > dropsExplained {
            let explained = min(missed, dropped - dropsExplained)
            dropsExplained += explained
            missed -= explained
        }
        guard missed > 0 else { return }
        gaps.record(.missed, count: Int(missed), subject: route.name, origin: route.host)
    }

    /// Counts and records (to be announced) one import refused; nats.c's delivery thread.
    private func refuse(_ subject: String, _ reason: String) {
        counters.malformed.add(1, ordering: .relaxed)
        gaps.record(.importRefused, count: 1, subject: subject, detail: reason)
    }

    /// nats.c's delivery thread, after each message: while nats.c holds more
    /// messages for `handle` (whose callbacks follow at once), takes up to ``sortLimit`` of them
    /// in before it posts any, so each origin's share is judged on what is waiting, not on the
    /// order it arrived in; then decodes and posts up to ``ImportBatch/countLimit`` events in
    /// the origins' turns — fewer when nats.c holds new messages at a look every ``serveStep``
    /// events or ``serveStepBytes`` — and goes on while nats.c holds nothing new. Without a handle (the
    /// subscription has completed) or when nats.c cannot tell (a closed subscription), it posts
    /// everything held.
    func serve(unlessMoreWaitIn handle: OpaquePointer?) {
        taken += 1
        if taken < CoreImporter.sortLimit, nats(hasMoreFor: handle) { return }
        repeat {
            taken = 0
            var budget = ImportBatch.countLimit
            var bytesSinceLook = 0
            while budget > 0, let held = shares.next() {
                decode(held)
                budget -= 1
                bytesSinceLook += held.bytes
                if batch.isFull { post() }
                if budget % CoreImporter.serveStep == 0 || bytesSinceLook >= CoreImporter.serveStepBytes {
                    bytesSinceLook = 0
                    if nats(hasMoreFor: handle) { break }
                }
            }
            post()
        } while !shares.isEmpty && !nats(hasMoreFor: handle)
        held.store(shares.count, ordering: .relaxed)
    }

    /// Whether nats.c holds messages for `handle` whose callbacks have not run yet.
    private func nats(hasMoreFor handle: OpaquePointer?) -> Bool {
        guard let handle else { return false }
        var messages: Int32 = 0
        var bytes: Int32 = 0
        return natsSubscription_GetPending(handle, &messages, &bytes) == NATS_OK && messages > 0
    }

    private func post() {
        guard !batch.events.isEmpty else { return }
        bus.post(contentsOf: batch.events)
        counters.imported.add(UInt64(batch.events.count), ordering: .relaxed)
        batch.removeAll()
    }
}

/// The events a core import subscription has decoded and not yet posted, bounded in count and
/// in bytes: nats.c's pending limits bound what it holds for the subscription, not what the
/// delivery thread gathers from it — 256 messages of a megabyte would be a quarter gigabyte.
struct ImportBatch {
    /// The most events one batch holds: bounds how long a burst's first event waits for its post.
    static let countLimit = 256
    /// Payload bytes past which a batch is posted: a few hundred ordinary events, one large one.
    static let byteLimit = 1 << 20

    private(set) var events: [Event] = []
    /// Payload bytes of `events`.
    private(set) var bytes = 0

    mutating func append(_ event: Event, bytes: Int) {
        events.append(event)
        self.bytes += bytes
    }

    /// Whether it must be posted now rather than wait for the messages nats.c still holds.
    var isFull: Bool { events.count >= Self.countLimit || bytes >= Self.byteLimit }

    mutating func removeAll() {
        events.removeAll(keepingCapacity: true)
        bytes = 0
    }
}
