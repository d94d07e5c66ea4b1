import CNATS
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import Synchronization
import SystemCalls

/// Durable-mode imports: this host's durable consumer on the stream, pulled from
/// (``ConsumerPull``) on the importer's own thread — the thread that posts imports into the bus.
///
/// Per batch (at most 256 messages and ``batchBytes``, or one larger message): acknowledge it at
/// once (the acknowledgement only spares the server redeliveries — the ledger, not the server,
/// says what was taken); drop redeliveries (stream sequence ≤ the ledger's), echoes and names no
/// import pattern wants; hold an event the stream stored ahead of an earlier one of its origin
/// until that one comes (``OriginOrder``); post the events as one batch
/// (`Bus.post(contentsOf:)`); then hand the ledger (``ImportLedger``) to the ``PositionRecorder``,
/// which writes it once the batch has settled. Recording only what was posted, a SIGKILL at any
/// instant loses nothing: the
/// next start fetches again what was not recorded (at most the batch of that instant, posted
/// again on the new process's bus). At start the consumer is re-created to deliver right after
/// the ledger's position, under a new name (``JetStreamSetup/placeConsumer(name:startSequence:filter:)``);
/// after a reconnect too, unless it delivered nothing past the ledger and waits for no
/// acknowledgement (``JetStreamSetup/resumableConsumer(_:filter:taken:)``), when it is pulled
/// from as it is.
///
/// The consumer reads the whole stream (`<prefix>.>`) and the import patterns are matched here:
/// only a consumer that sees every event of an origin can tell an event the stream stored ahead
/// of an earlier one from one whose predecessor a filter left out (``OriginOrder``), and
/// nats-server 2.9 consumers take one filter anyway. What that costs a host importing few of a
/// busy stream's events — fetching the rest to drop them — is the price of its origins' order.
///
/// Each bind makes a new pull inbox: messages the old consumer still sends to the old one
/// (a fetch answered as the link went down) must not reach the ledger, where one with a higher
/// stream sequence would make the new consumer's earlier messages look like redeliveries. The old
/// subscription is unsubscribed at once but destroyed only 10 s later (``retirement``, checked
/// at later binds), or once the connection is closed (``release()``): nats.c 3.4 (Debian 12)
/// frees memory twice or reads freed memory when a subscription is freed while its read loop
/// still hands it a message it looked up (nats.c #637, fixed in 3.6.1); right after a reconnect
/// a fetch can find a delivery that went nowhere and bind again within milliseconds.
final class DurableImporter: @unchecked Sendable {
    // @unchecked: `ledger`, `window`, `subscription`, `retired`, `hasPosition` are touched
    // only on the importer thread (the position file is written on the recorder's queue), and `retired` and `pull` by whichever of its end and
    // `release` comes last (``subscriptionUsers``);
    // `needsRebind` and `stopping` are atomics; `origins` is a Mutex for status readers.

    private let client: NATSClient
    private let setup: JetStreamSetup
    /// The context `setup` uses, held while the importer thread runs (it may outlive the
    /// bridge's `stop`, see ``JetStreamContext``).
    private let context: JetStreamContext
    private let bus: Bus
    private let subjects: Subjects
    private let patterns: [EventPattern]
    private let counters: BridgeCounters
    private let gaps: GapBook
    private let logger: Logger
    private let filter: String
    /// Routes by subject (this thread's): a subject's checks are made once, not per message.
    private let routes: ImportRoutes
    /// What this run has taken in (posted, or dropped as an echo, a name no pattern wants…).
    private var ledger = ImportLedger()
    /// The origin sequences taken in lately: a copy stored twice is dropped, a late event posted.
    private var window = OriginWindow()
    /// Events the stream stored ahead of an earlier one of their origin, held until it comes.
    private var order: OriginOrder<Event?>
    /// Per origin holding events: the ledger just before its first held event (and
    /// ``postedCount`` there). The position file is not written past the earliest, so a restart
    /// fetches the held events again.
    private var holdStarts: [String: (ledger: ImportLedger, total: UInt64)] = [:]
    /// Writes the position file once posted batches have settled, on its own queue: behind
    /// `ledger` while they settle, or after a failed write (retried), when the next run would
    /// post the difference again.
    private let recorder: PositionRecorder
    /// Events this run posted (``PositionRecorder`` counts how many the position file covers).
    private var postedCount: UInt64 = 0
    /// The bus sequence of the last event this run posted.
    private var lastPostedSequence: UInt64 = 0
    private var hasPosition = false
    /// The consumer sequence its next first delivery must carry (1 after each re-creation).
    private var nextDelivery: UInt64 = 1
    /// Whether this run has made its consumer: later binds may resume it.
    private var bound = false
    /// The consumer this run made last (a new name at each creation, see `placeConsumer`).
    private var consumerName: String?
    /// Whether the next bind re-creates the consumer even if it could be resumed.
    private var recreate = false
    /// When the last fetch brought messages (or the consumer was last bound).
    private var lastDelivered = ContinuousClock.now
    /// How long a consumer may deliver nothing before it is checked: one that said messages were
    /// pending (when made, or at its last delivery) is made again — one on a cluster's server
    /// that lost its stream's leader delivered nothing for 30 s with 13 000 messages pending
    /// (nats-server 2.9.10), then resumed with a gap. One that said nothing was pending is made
    /// again if the stream's leader holds a message for it after the ledger
    /// (``JetStreamSetup/lastSequence(matching:)``): a consumer on a server whose copy of the
    /// stream stopped catching up says nothing is pending, for minutes (nats-server 2.9.10;
    /// twice in five cluster chaos runs a host's imports stopped for good). A healthy consumer
    /// delivers within milliseconds; a false alarm costs one re-creation. The wait doubles up to
    /// 32 s while nothing is delivered, so an idle host asks the leader at most every 32 s.
    static let stuckAfter = Duration.seconds(2)
    /// The wait before the next re-creation for that reason: ``stuckAfter``, doubled after each
    /// one until a delivery comes.
    private var stuckWait = stuckAfter
    private var pull: ConsumerPull?
    /// Subscriptions replaced at a bind, unsubscribed then, destroyed once ``retirement`` has
    /// passed (or by `release`), for the reason above.
    private var retired: [(subscription: OpaquePointer, since: ContinuousClock.Instant)] = []
    /// How long a replaced subscription is kept before it is destroyed: far longer than nats.c's
    /// read loop holds a subscription it looked up (microseconds, or a scheduling delay on a
    /// loaded machine).
    static let retirement = Duration.seconds(10)
    private let needsRebind = Atomic<Bool>(true)
    private let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    /// The importer thread, which uses the pull subscriptions, and ``release()``, which comes once
    /// the connection is closed: the last of the two to be done destroys them. Why not `release`
    /// alone: `stop` waits for the thread at most its timeout, and a thread still inside nats.c
    /// then outlives it — its subscriptions were left undestroyed for good.
    private let subscriptionUsers = Atomic<Int>(2)
    let origins = Mutex<[String: ImportLedger.Position]>([:])
    let lastError = Mutex<String?>(nil)
    /// What status shows as the import's last error: binding's, or the position file's.
    var lastErrorDescription: String? { lastError.withLock { $0 } ?? recorder.lastError.withLock { $0 } }

    init(client: NATSClient, setup: JetStreamSetup, context: JetStreamContext, bus: Bus, subjects: Subjects, patterns: [EventPattern],
         counters: BridgeCounters, gaps: GapBook, logger: Logger, stateDirectory: String) throws(BridgeError) {
        self.client = client
        self.setup = setup
        self.context = context
        self.bus = bus
        self.subjects = subjects
        self.patterns = patterns
        self.counters = counters
        self.gaps = gaps
        self.logger = logger
        let ledgerFile = StateFile(directory: stateDirectory, name: "bridge-\(setup.durable.stream)-\(setup.consumer).position")
        var loaded: ImportLedger?
        if let text = try ledgerFile.read() { loaded = try ImportLedger(text: text, file: ledgerFile.path) }
        self.filter = subjects.all
        self.routes = ImportRoutes(subjects: subjects, patterns: patterns, patternIndex: nil)
        self.order = OriginOrder(last: loaded?.origins ?? [:], patience: setup.durable.holdPatience)
        self.recorder = PositionRecorder(file: ledgerFile, recorded: loaded ?? ImportLedger(), bus: bus, counters: counters,
                                         logger: logger)
        if let loaded {
            ledger = loaded
            hasPosition = true
        }
        let initial = ledger.origins
        origins.withLock { $0 = initial }
    }

    func start() {
        context.hold()
        let thread = Thread { [self] in
            System.nameCurrentThread("eventbus.import")
            run()
            letGoOfSubscriptions()
            context.release()
            finished.signal()
        }
        thread.start()
    }

    /// nats.c's reconnected callback: re-position the consumer before the next fetch.
    func reconnected() { needsRebind.store(true, ordering: .relaxed) }

    /// Stops fetching, waiting at most `timeout` for the importer thread to end.
    func stop(timeout: Duration) {
        stopping.store(true, ordering: .relaxed)
        _ = finished.wait(timeout: .now() + .nanoseconds(Int(timeout.clampedNanoseconds)))
    }

    /// Called once the connection is closed (no read loop is left to hand the pull subscriptions
    /// a message): destroys them, or leaves that to the importer thread if it has not ended yet.
    func release() {
        letGoOfSubscriptions()
    }

    private func letGoOfSubscriptions() {
        // Acquiring and releasing: the other's use of the subscriptions happens before this.
        guard subscriptionUsers.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 else { return }
        for replaced in retired.map(\.subscription) + [pull?.subscription].compactMap({ $0 }) { natsSubscription_Destroy(replaced) }
        retired = []
        pull = nil
    }

    /// The bytes a fetch asks the server for at most (its `max_bytes`), so a batch of large
    /// messages — 256 of a megabyte would be a quarter gigabyte, and as much again decoded — is
    /// a few megabytes. A message larger than this alone is answered "Message Size Exceeds
    /// MaxBytes" and fetched by itself (``fetch(_:alone:)``).
    static let batchBytes: Int64 = 4 << 20

    private func run() {
        var alone = false
        while !stopping.load(ordering: .relaxed) {
            if needsRebind.load(ordering: .relaxed) || pull == nil {
                guard client.state == .connected else { Thread.sleep(forTimeInterval: 0.05); continue }
                needsRebind.store(false, ordering: .relaxed)
                do {
                    try bind()
                    lastError.withLock { $0 = nil }
                } catch {
                    logger.error("bridge: durable import not ready: \(error); retrying")
                    lastError.withLock { $0 = error.description }
                    needsRebind.store(true, ordering: .relaxed)
                    // Each attempt already waited for the JetStream API (2 s, 1 s to resume).
                    Thread.sleep(forTimeInterval: 0.25)
                    continue
                }
            }
            takeExpiredHolds()
            guard let pull else { continue }
            // Up to 256 messages and ``batchBytes``, waiting at most 250 ms; `alone`: the next
            // message, of any size.
            let outcome = pull.fetch(batch: alone ? 1 : 256, maxBytes: alone ? 0 : Self.batchBytes, wait: .milliseconds(250))
            alone = false
            switch outcome {
            case .messages(let messages):
                lastDelivered = .now
                stuckWait = Self.stuckAfter
                take(messages, from: pull)
                messages.forEach { natsMsg_Destroy($0) }
            case .nothing:
                guard lastDelivered.duration(to: .now) > stuckWait else { break }
                let pending = counters.importLag.load(ordering: .relaxed)
                // Doubled until something is delivered: a cluster too slow to deliver within the
                // wait must not be kept busy making consumers, nor an idle stream's leader asked.
                let waited = stuckWait
                stuckWait = min(stuckWait * 2, .seconds(32))
                lastDelivered = .now
                if pending > 0 {
                    logger.notice("bridge: consumer \(consumerName ?? setup.consumer) said \(pending) message(s) were pending and delivered nothing for \(waited); making it again after stream sequence \(ledger.streamSequence)")
                } else if let last = setup.lastSequence(matching: filter), last > ledger.streamSequence {
                    // Its server's copy of the stream is behind the leader's (see `lastSequence`).
                    logger.notice("bridge: consumer \(consumerName ?? setup.consumer) said nothing was pending and delivered nothing for \(waited), but the stream's leader holds messages up to sequence \(last) after this host's \(ledger.streamSequence): its server's copy of the stream is behind; making it again")
                } else {
                    break
                }
                counters.consumersRemade.add(1, ordering: .relaxed)
                recreate = true
                needsRebind.store(true, ordering: .relaxed)
            case .tooLarge:
                // The next message is larger than a batch's bytes: the server left it for a
                // fetch of its own.
                alone = true
            case .failed(let reason):
                // A closed or lost connection, or a consumer gone: re-bind once it is back.
                if client.state == .connected { logger.notice("bridge: \(reason); binding to the consumer again") }
                needsRebind.store(true, ordering: .relaxed)
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
        // A stop: what was posted reached the bus's subscribers, which are drained after this.
        recorder.recordAll()
    }

    private func bind() throws(BridgeError) {
        let cutoff = ContinuousClock.now - Self.retirement
        while let oldest = retired.first, oldest.since <= cutoff {
            natsSubscription_Destroy(oldest.subscription)
            retired.removeFirst()
        }
        if let pull {
            natsSubscription_Unsubscribe(pull.subscription)
            retired.append((pull.subscription, .now))
        }
        pull = nil
        // Within a run, the consumer this host made may still serve: pulled from as it is when
        // it delivered nothing this host did not take in (see `resumableConsumer`).
        if bound, !recreate, let name = consumerName,
           let (lastDelivery, pending) = setup.resumableConsumer(name, filter: filter, taken: ledger.streamSequence) {
            pull = try ConsumerPull(connection: client.connection, stream: setup.durable.stream, consumer: name,
                                    domain: setup.durable.domain)
            nextDelivery = lastDelivery + 1
            counters.importLag.store(pending, ordering: .relaxed)
            lastDelivered = .now
            logger.info("bridge: importing from stream \(setup.durable.stream) after sequence \(ledger.streamSequence) (consumer \(name) resumed as it was)")
            return
        }
        let (first, last, note) = try setup.ensureStream()
        if let note { logger.notice("bridge: \(note)") }
        if !hasPosition {
            // First start of this host: from the stream's newest event on (or its oldest).
            ledger.streamSequence = setup.durable.startAtBeginning ? (first > 0 ? first - 1 : 0) : last
            try recorder.replace(with: ledger)
            hasPosition = true
        } else if ledger.streamSequence > last {
            logger.warning("bridge: stream \(setup.durable.stream) ends at \(last) but this host had taken in up to \(ledger.streamSequence): the stream was re-created; starting at its beginning")
            ledger.streamSequence = first > 0 ? first - 1 : 0
            try recorder.replace(with: ledger)
        } else if first > 0, ledger.streamSequence + 1 < first {
            // The stream's limits discarded events this host had not taken in yet.
            gaps.record(.streamExpired, count: Int(first - 1 - ledger.streamSequence), subject: filter)
        }
        let name = "\(setup.consumer)-\(String(UInt32.random(in: .min ... .max), radix: 16))"
        do {
            // What it has to deliver, until its first delivery says: a consumer that delivers
            // none of it is made again (see `stuckAfter`).
            let pending = try setup.placeConsumer(name: name, startSequence: ledger.streamSequence + 1, filter: filter)
            counters.importLag.store(pending, ordering: .relaxed)
        } catch {
            setup.requestDelete(name, connection: client.connection)  // made late, if at all
            throw error
        }
        // The one it replaces; at a run's first bind, the fixed name earlier versions used.
        setup.requestDelete(consumerName ?? setup.consumer, connection: client.connection)
        consumerName = name
        pull = try ConsumerPull(connection: client.connection, stream: setup.durable.stream, consumer: name,
                                domain: setup.durable.domain)
        nextDelivery = 1
        bound = true
        lastDelivered = .now
        recreate = false
        logger.info("bridge: importing from stream \(setup.durable.stream) after sequence \(ledger.streamSequence) (consumer \(name), \(filter))")
    }

    /// Counts and records (to be announced) one import refused.
    private func refuse(_ subject: String, _ reason: String) {
        counters.malformed.add(1, ordering: .relaxed)
        gaps.record(.importRefused, count: 1, subject: subject, detail: reason)
    }

    private func take(_ messages: [OpaquePointer], from pull: ConsumerPull) {
        var events: [Event] = []
        let before = ledger
        var lag: UInt64 = 0
        // Acknowledged at once, the whole batch with its last delivery (ack policy "all", see
        // `placeConsumer`): the acknowledgement only spares the server redeliveries — the
        // position file says what this host has taken in, and each bind that re-creates the
        // consumer starts from it. Acknowledged only after posting, a batch on a loaded host
        // outlived a short `ack_wait` and came again, and the redeliveries slowed the host
        // further. One for the batch, not one per message: each was a publish for this thread
        // and an acknowledgement for the server to process.
        if let last = messages.last { pull.acknowledge(last) }
        let now = ContinuousClock.now
        for message in messages {
            var metadata: UnsafeMutablePointer<jsMsgMetaData>?
            guard natsMsg_GetMetaData(&metadata, message) == NATS_OK, let metadata else {
                counters.malformed.add(1, ordering: .relaxed)
                continue
            }
            let streamSequence = metadata.pointee.Sequence.Stream
            let delivery = metadata.pointee.Sequence.Consumer
            let firstDelivery = metadata.pointee.NumDelivered == 1
            lag = metadata.pointee.NumPending
            jsMsgMetaData_Destroy(metadata)
            if firstDelivery {
                // The consumer numbers its deliveries 1, 2, 3…: a first delivery past the next
                // number means one went to a fetch this host never got (answered while the link
                // was down) — unless it is the stream's very next message, when the numbers
                // skipped were redeliveries (this consumer reads the whole stream, so nothing of
                // the stream was skipped). Taking what follows a missed one would move the ledger
                // past it for good; instead re-create the consumer after the ledger, which
                // delivers it again, in order.
                guard delivery <= nextDelivery || streamSequence == ledger.streamSequence + 1 else {
                    logger.notice("bridge: the consumer delivered \(delivery - nextDelivery) message(s) this host did not receive (a fetch answered while the link was down); reading them again after stream sequence \(ledger.streamSequence)")
                    needsRebind.store(true, ordering: .relaxed)
                    break
                }
                nextDelivery = max(nextDelivery, delivery + 1)
            }
            guard streamSequence > ledger.streamSequence else {
                counters.redeliveriesDropped.add(1, ordering: .relaxed)
                continue
            }
            let previousStreamSequence = ledger.streamSequence
            ledger.streamSequence = streamSequence
            let route = routes.route(natsMsg_GetSubject(message)!)
            switch route.action {
            case .post, .skip: break
            case .echo:
                counters.echoesDropped.add(1, ordering: .relaxed)
                continue
            case .refused:
                refuse(route.refusal?.subject ?? "?", route.refusal?.reason ?? "refused")
                continue
            }
            let payload = UnsafeRawBufferPointer(start: natsMsg_GetData(message), count: Int(natsMsg_GetDataLength(message)))
            var header = WireFormat.Header(instance: 0, sequence: 0)
            var event: Event?
            if route.action == .post {
                do {
                    guard payload.baseAddress != nil else { throw WireFormat.DecodeError(description: "no payload") }
                    event = try WireFormat.decode(payload, name: route.name, host: route.host, shapes: route.shapes, header: &header)
                } catch {
                    refuse(route.name, "payload from \(route.host): \(error)")
                }
            }
            if event == nil {
                // Not posted (a name no pattern wants, or refused): its place in its origin's
                // order still counts, or the next event would wait for it.
                guard payload.baseAddress != nil, let origin = try? WireFormat.header(payload) else { continue }
                header = origin
            }
            let link = OriginOrder<Event?>.Link(host: route.host, instance: header.instance, sequence: header.sequence,
                                                previous: header.previous)
            let held = order.heldCount
            // What holding it costs: the event, or the link alone (an event not posted).
            switch order.admit(link, event, bytes: (event?.estimatedBytes ?? 0) + 128, now: now) {
            case .next:
                accept(OriginOrder.Entry(link: link, item: event), into: &events)
            case .ready(let entries):
                for entry in entries { accept(entry, into: &events) }
            case .held:
                if holdStarts[route.host] == nil {
                    var start = ledger  // nothing of this message is in it but its stream sequence
                    start.streamSequence = previousStreamSequence
                    holdStarts[route.host] = (start, postedCount + UInt64(events.count))
                }
            case .heldAlready:
                counters.redeliveriesDropped.add(1, ordering: .relaxed)
            }
            if order.heldCount < held { counters.reordered.add(UInt64(held - order.heldCount), ordering: .relaxed) }
            if order.isOverBudget {
                let shed = order.shed()
                logShed(shed)
                for entry in shed { accept(entry, into: &events) }
            }
        }
        guard post(events, before: before) else { return }
        counters.importLag.store(lag, ordering: .relaxed)
    }

    /// Takes in one event in its origin's order (or only its place in that order, without an
    /// event): judged against what was taken before (``OriginWindow``), recorded, added to `events`.
    private func accept(_ entry: OriginOrder<Event?>.Entry, into events: inout [Event]) {
        let link = entry.link
        guard let event = entry.item else {
            ledger.record(host: link.host, instance: link.instance, sequence: link.sequence)
            return
        }
        switch window.judge(host: link.host, instance: link.instance, sequence: link.sequence, last: ledger.origins[link.host]) {
        case .inOrder:
            ledger.record(host: link.host, instance: link.instance, sequence: link.sequence)
        case .late:
            counters.outOfOrder.add(1, ordering: .relaxed)
        case .duplicate:
            // Stored twice (see OriginWindow): its first copy was taken in.
            counters.redeliveriesDropped.add(1, ordering: .relaxed)
            return
        }
        window.taken(host: link.host, instance: link.instance, sequence: link.sequence)
        events.append(event)
    }

    /// When the consumer last said messages were pending (see `takeExpiredHolds`).
    private var lastBehind = ContinuousClock.now
    /// When holding past ``OriginOrder/totalLimit`` or ``OriginOrder/byteLimit`` was last logged.
    private var lastShedLog: ContinuousClock.Instant?

    /// Says (at most once a minute: only a publisher that claims predecessors which never come
    /// gets here) which origins' held events were taken as they are.
    private func logShed(_ entries: [OriginOrder<Event?>.Entry]) {
        guard lastShedLog.map({ $0.duration(to: .now) >= .seconds(60) }) ?? true else { return }
        lastShedLog = .now
        let hosts = Set(entries.map(\.link.host)).sorted().joined(separator: ", ")
        logger.notice("bridge: events held for their origin's order passed \(OriginOrder<Event?>.totalLimit) or \(OriginOrder<Event?>.byteLimit >> 20) MiB; taking in \(entries.count) held from \(hosts) as they are")
    }

    /// Held events whose predecessor did not come within ``OriginOrder/patience`` while this
    /// host was caught up with the stream: taken in as they are (the predecessor, if it comes
    /// after all, is posted late). While the consumer has messages pending the predecessor may
    /// be among them — a host importing slowly must not give up on what it has not read yet
    /// (the held events stay bounded by ``OriginOrder/limit``).
    private func takeExpiredHolds() {
        guard !holdStarts.isEmpty else { return }
        if counters.importLag.load(ordering: .relaxed) > 0 { lastBehind = .now }
        guard lastBehind.duration(to: .now) >= order.patience else { return }
        let entries = order.expired(now: .now)
        guard !entries.isEmpty else { return }
        for host in Set(entries.map(\.link.host)) {
            logger.notice("bridge: \(host)'s event after its sequence \(ledger.origins[host]?.sequence ?? 0) did not come within \(order.patience); taking in the \(entries.count { $0.link.host == host }) event(s) held behind it")
        }
        let before = ledger
        var events: [Event] = []
        for entry in entries { accept(entry, into: &events) }
        _ = post(events, before: before)
    }

    /// Posts what a batch took in, then queues its ledger to be recorded (``PositionRecorder``);
    /// false if the bus has finished (the host is stopping): nothing was posted, nothing is
    /// recorded, the next run fetches the batch again.
    private func post(_ events: [Event], before: ImportLedger) -> Bool {
        // Post first, then record: the position file never names an event the bus has not
        // been given, so a SIGKILL at any instant loses nothing — what was posted and not yet
        // recorded is fetched and posted again by the next run (a new bus, which never saw it).
        // Within this run, the in-memory ledger (advanced above) drops every redelivery.
        let numbers = bus.post(contentsOf: events)  // empty for no events, or when the bus has finished
        if !events.isEmpty, numbers.isEmpty {
            ledger = before
            logger.notice("bridge: the bus has finished; leaving \(events.count) fetched event(s) for the next start")
            stopping.store(true, ordering: .relaxed)
            return false
        }
        counters.imported.add(UInt64(events.count), ordering: .relaxed)
        postedCount += UInt64(events.count)
        if let last = numbers.last { lastPostedSequence = last }
        if ledger != before {
            let snapshot = ledger.origins
            origins.withLock { $0 = snapshot }
        }
        // While events are held, what may be recorded ends before the earliest of them.
        holdStarts = holdStarts.filter { order.isHolding($0.key) }
        let recordable = holdStarts.values.min { $0.ledger.streamSequence < $1.ledger.streamSequence } ?? (ledger, postedCount)
        recorder.queue(total: postedCount, recordable: recordable.ledger, recordableTotal: recordable.total, sequence: lastPostedSequence)
        return true
    }
}
