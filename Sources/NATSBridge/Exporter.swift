import CNATS
@_spi(EventBusHost) import EventBusKit
import EventFieldCoding
import Foundation
import Synchronization
import SystemCalls

/// Takes events from the ``ExportQueue`` and publishes them, on its own thread — the only
/// thread that publishes this host's events.
///
/// - Core mode: `natsConnection_Publish`. While disconnected nats.c keeps publishes in its
///   reconnect buffer; when that is full, publishing fails with `NATS_INSUFFICIENT_BUFFER` and
///   the lost events are recorded for a `bridge.gap` (`reconnect_buffer`). When the connection
///   breaks (a hung server's write deadline), what nats.c took since the server last confirmed
///   is announced as possibly lost (`export_unconfirmed`, ``connectionBroke()``).
/// - Durable mode: `js_PublishMsgAsync` with the message id `<host>:<instance>:<sequence>`, so
///   the server drops a re-published event within its duplicate window. While the connection is
///   down the thread waits and events wait in the export queue (bounded: overflow is announced).
///   When the connection broke or an acknowledgement failed or timed out, every export not yet
///   acknowledged is published again, oldest first, before anything new
///   (``OutstandingPublishes``): the stream stores this host's events in their order.
///
/// Bytes: the queue's byte bound covers every export the bridge holds. The exporter releases an
/// event's bytes once nats.c has it (core: nats.c's buffers are bounded by themselves, the
/// reconnect buffer by `reconnect_buffer`) or, durable, swaps them for what an unacknowledged
/// publish holds (``inFlightBytes(_:)``: nats.c's message until its acknowledgement, and the
/// exporter's own copy to publish again), released when the stream acknowledged it or it was
/// given up. Without that, nats.c's window of 4 096 unacknowledged publishes could hold 4 096
/// events of any size beside the queue's bound.
final class Exporter: @unchecked Sendable {
    // @unchecked: `thread` state (`nextExport`) is touched only on the exporter thread;
    // `outstanding` is locked.

    private let queue: ExportQueue
    private let client: NATSClient
    private let subjects: Subjects
    private let instance: UInt64
    private let counters: BridgeCounters
    private let gaps: GapBook
    private let jetStream: OpaquePointer?
    /// Durable: the context `jetStream` points into, held while the thread runs (it may outlive
    /// the bridge's `stop`, see ``JetStreamContext``).
    private let context: JetStreamContext?
    private let finished = DispatchSemaphore(value: 0)
    /// Durable: creates or checks the stream; run (on this thread) once connected at start and
    /// after publishes found no stream, so an export-only host whose NATS was down at start, or
    /// whose stream was deleted, does not publish into nothing.
    private let ensureStream: (() throws -> Void)?
    private let needsStream = Atomic<Bool>(true)
    /// Durable: events taken from the queue and not yet handed to nats.c (status counts them
    /// as queued).
    let holding = Atomic<Int>(0)

    init(queue: ExportQueue, client: NATSClient, subjects: Subjects, instance: UInt64, counters: BridgeCounters,
         gaps: GapBook, jetStream: JetStreamContext?, ensureStream: (() throws -> Void)? = nil) {
        self.ensureStream = ensureStream
        self.queue = queue
        self.client = client
        self.subjects = subjects
        self.instance = instance
        self.counters = counters
        self.gaps = gaps
        self.context = jetStream
        self.jetStream = jetStream?.pointer
    }

    func start() {
        context?.hold()
        let thread = Thread { [self] in
            System.nameCurrentThread("eventbus.export")
            if jetStream == nil { runCore() } else { runDurable() }
            context?.release()
            finished.signal()
        }
        thread.start()
    }

    /// Waits until the thread has drained the (stopped) queue, at most `timeout`.
    func join(timeout: Duration) -> Bool {
        finished.wait(timeout: .now() + .nanoseconds(Int(timeout.clampedNanoseconds))) == .success
    }

    /// Whether an event the bus delivers to the bridge goes out: not an import (an event with an
    /// origin is never exported again: no loops) and not one of the bridge's own reports
    /// (`bridge.*`). On the bus's delivery loop, for every event posted, so the origin is looked
    /// for without hashing its key: an import carries three origin fields, so an event with
    /// fewer is local, and among a few fields comparing the keys (one starting with `@` first)
    /// costs less than the SipHash run of a lookup.
    static func isExported(_ event: Event) -> Bool {
        if isReport(event.name) { return false }
        let fields = event.fields
        guard fields.count >= 3 else { return true }
        guard fields.count <= 8 else { return fields[EventOrigin.hostField] == nil }
        for key in fields.keys where key.utf8.first == UInt8(ascii: "@") && key == EventOrigin.hostField { return false }
        return true
    }

    /// Whether `name` is under `bridge.`: compared as bytes (`starts(with:)` ran unspecialized,
    /// element by element, for every event posted).
    private static func isReport(_ name: String) -> Bool {
        let prefix: StaticString = "bridge."
        return name.utf8.withContiguousStorageIfAvailable { utf8 in
            utf8.count >= prefix.utf8CodeUnitCount && memcmp(utf8.baseAddress!, prefix.utf8Start, prefix.utf8CodeUnitCount) == 0
        } ?? name.hasPrefix("bridge.")
    }

    /// Whether `name` can be a subject's tail: NATS tokens, no wildcards. The bus accepts any
    /// name at post; a name NATS cannot carry is not exported, and announced as a failed publish.
    static func isExportable(_ name: String) -> Bool {
        var tokenLength = 0
        var tokenIsWildcard = false
        for byte in name.utf8 {
            switch byte {
            case UInt8(ascii: "."):
                if tokenLength == 0 || tokenIsWildcard { return false }
                tokenLength = 0
                tokenIsWildcard = false
            case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"), UInt8(ascii: "\n"):
                return false
            case UInt8(ascii: "*"), UInt8(ascii: ">"):
                tokenIsWildcard = true
                tokenLength += 1
            default:
                tokenLength += 1
            }
        }
        return tokenLength > 0 && !tokenIsWildcard
    }

    /// Durable mode, after a batch that emptied the queue: the exporter waits this long before it
    /// blocks, so the next events gather into a batch instead of each one waking the thread (a
    /// wake-up costs more than publishing an event). Bounds the latency it adds. (Core mode
    /// paces itself with ``sendNow(_:)``'s round trip instead.)
    static let linger = Duration.microseconds(30)

    private func lingerIfDrained(_ taken: Int) {
        guard taken < 256 else { return }
        System.sleep(for: Self.linger)
    }

    /// The subject of the name published last, as a C string, and whether the name can be
    /// exported at all. Events come in runs of one name; building `<prefix>.<host>.<name>` and
    /// its C copy for each event cost two allocations and frees on this thread.
    private struct LastSubject {
        var name = ""
        /// The subject as a C string (core mode publishes it) and as a `String` (durable mode
        /// keeps it with each unacknowledged export).
        var subject: [CChar] = [0]
        var text = ""
        var exportable = false

        mutating func update(_ name: String, _ subjects: Subjects) {
            guard name != self.name else { return }
            self.name = name
            exportable = Exporter.isExportable(name)
            text = subjects.subject(for: name)
            subject = text.utf8CString.map { $0 }
        }
    }

    /// Durable: a publish's JetStream message id, `<host>:<instance>:<sequence>`, written as a C
    /// string into one buffer (exporter thread): building it as a `String` per publish cost an
    /// allocation and an integer formatting through the generic `description`.
    struct MessageID {
        private var buffer: [CChar]
        private let prefixLength: Int

        init(host: String, instance: UInt64) {
            buffer = Array("\(host):\(instance):".utf8CString.dropLast())
            prefixLength = buffer.count
            buffer.append(contentsOf: repeatElement(0, count: 21))  // 20 digits at most, and the NUL
        }

        mutating func withCString<Result>(_ sequence: UInt64, _ body: (UnsafePointer<CChar>) -> Result) -> Result {
            var digits = prefixLength
            var rest = sequence
            repeat {
                buffer[digits] = CChar(UInt8(ascii: "0") + UInt8(rest % 10))
                rest /= 10
                digits += 1
            } while rest > 0
            buffer[prefixLength..<digits].reverse()
            buffer[digits] = 0
            return buffer.withUnsafeBufferPointer { body($0.baseAddress!) }
        }
    }

    /// What an unacknowledged publish of `payload` bytes holds, counted against the export
    /// buffer's bytes: the payload twice (nats.c's message and the copy kept to publish it
    /// again), and the message's subject, id header and map entries rounded up. Used at publish
    /// and at acknowledgement alike, so what is added is exactly what is released.
    static func inFlightBytes(_ payload: Int) -> Int { 2 * payload + 256 }

    /// Core mode: the most events taken at once. A batch shorter than this emptied the queue
    /// (``sendNow(_:)`` follows). Large enough that a queue filled faster than the thread
    /// publishes is usually handed over whole (``ExportQueue/take(max:into:sizes:)`` then moves
    /// its array instead of copying events); its bytes are released once it is published.
    static let coreBatchLimit = 4_096

    private func runCore() {
        var batch: [Event] = []
        var sizes: [Int] = []
        var payload = FieldWriter()
        var last = LastSubject()
        var numbers = ExportNumbers()
        var lastSent: UInt64 = 0
        var failed = false
        let connection = client.connection
        while queue.take(max: Self.coreBatchLimit, into: &batch, sizes: &sizes) {
            for event in batch {
                last.update(event.name, subjects)
                guard last.exportable else {
                    gaps.record(.publishFailed, count: 1, subject: event.name)
                    continue
                }
                WireFormat.encode(event, instance: instance, number: numbers.next(for: event.name), into: &payload)
                let status = last.subject.withUnsafeBufferPointer { subject in
                    payload.withUnsafeBytes { bytes in
                        natsConnection_Publish(connection, subject.baseAddress, bytes.baseAddress, Int32(bytes.count))
                    }
                }
                switch status {
                case NATS_OK:
                    numbers.commit()
                    counters.exported.add(1, ordering: .relaxed)
                    published.add(1, ordering: .relaxed)
                case NATS_INSUFFICIENT_BUFFER:
                    // Reconnecting already: nats.c's disconnected callback says what may be lost.
                    gaps.record(.reconnectBuffer, count: 1, subject: event.name)
                default:
                    gaps.record(.publishFailed, count: 1, subject: event.name)
                    failed = true
                }
            }
            if failed {
                // A write failed (its deadline passed, the socket is shut): what the server had
                // not confirmed may be lost with the connection. Said now, not only when nats.c's disconnected callback comes: a
                // flush in between could pass for a confirmation (see `sendNow`).
                recordUnconfirmed()
                failed = false
            } else if batch.count < Self.coreBatchLimit {
                sendNow(&lastSent)
            }
            batch.removeAll(keepingCapacity: true)
            // nats.c has them (or they were announced as lost): the queue may take their bytes again.
            queue.release(sizes.reduce(0, +))
            sizes.removeAll(keepingCapacity: true)
        }
    }

    /// Core mode, after a batch that emptied the queue: has nats.c write what it buffered now
    /// (with a PING, whose PONG is awaited at most ``flushWait``) instead of leaving it to its
    /// flusher thread, which gathers for 1 ms before it writes — most of an event's latency at
    /// low rates (p50 0.6 → 0.04 ms at 10 000 events/s). The round trip also paces the thread:
    /// while it waits, the next events gather into a batch.
    ///
    /// At most once per ``flushGap``: every flush costs a PONG that nats.c's reader thread must
    /// take the connection's lock for (contended by this thread's publishing) and a wake-up of
    /// this thread. At high rates the next batch is never far, and nats.c writes as its buffer
    /// fills or its flusher wakes; flushing after every short batch there cost more CPU per
    /// event (2.03 against 1.86 µs in one comparison, with nats.c's reader thread spinning on
    /// the connection's lock for each PONG).
    private func sendNow(_ lastSent: inout UInt64) {
        let now = MonotonicClock.now()
        guard now &- lastSent >= Self.flushGap else { return }
        let before = published.load(ordering: .relaxed)
        // A timeout changes nothing: the bytes are written. A PONG says the server has read them
        // — though nats.c 3.4 also returns OK, at once and without a PONG, when the PING's write
        // fails (a socket its write deadline shut, before nats.c noticed): a publish in the same
        // batch fails then too and `runCore` skips this, but a batch whose publishes all went
        // into nats.c's buffer is confirmed wrongly. (Limit: see docs/fleet-operations.md, A server that hangs.)
        if natsConnection_FlushTimeout(client.connection, Self.flushWait) == NATS_OK { confirm(before) }
        lastSent = MonotonicClock.now()
    }

    /// Core mode: publishes nats.c took, and how many of those the server has confirmed it read
    /// (a flush's PONG came back after them). When the connection breaks, what nats.c took and
    /// the server did not confirm may have been lost with it — in nats.c's write buffer or the
    /// socket's, a few megabytes against a server that hung — and core NATS cannot say which.
    private let published = Atomic<UInt64>(0)
    private let confirmed = Atomic<UInt64>(0)

    /// Raises `confirmed` to `count` (never lowers it); returns what it was.
    @discardableResult
    private func confirm(_ count: UInt64) -> UInt64 {
        var current = confirmed.load(ordering: .relaxed)
        while current < count {
            let (exchanged, original) = confirmed.compareExchange(expected: current, desired: count, ordering: .relaxed)
            if exchanged { return current }
            current = original
        }
        return current
    }

    /// nats.c's disconnected callback. Core mode: what the server had not confirmed may be lost.
    /// Durable: everything outstanding is published again, in order, before anything new — the
    /// flag is set now, not only at the reconnect, so that nothing new is published on the next
    /// connection before the re-publish.
    func connectionBroke() {
        if jetStream != nil {
            republishNeeded.store(true, ordering: .relaxed)
        } else {
            recordUnconfirmed()
        }
    }

    /// Core mode, the exporter thread after a failed publish or nats.c's disconnected callback:
    /// records what may be lost, once.
    private func recordUnconfirmed() {
        let unconfirmed = connectionLost()
        guard unconfirmed > 0 else { return }
        gaps.record(.exportUnconfirmed, count: unconfirmed, subject: subjects.subject(for: ">"),
                    detail: "up to \(unconfirmed) export(s) the server had not confirmed when the connection broke")
    }

    /// How many publishes since the server last
    /// confirmed may be lost with the connection (at most; nats.c may still deliver those it
    /// kept in its reconnect buffer). They count as confirmed from now on: said once.
    private func connectionLost() -> Int {
        guard jetStream == nil else { return 0 }
        let now = published.load(ordering: .relaxed)
        let before = confirm(now)
        return now > before ? Int(now - before) : 0
    }

    /// Milliseconds; bounds the wait when the server is slow or gone.
    static let flushWait: Int64 = 10
    /// Nanoseconds between flushes at least.
    static let flushGap: UInt64 = 50_000

    /// Durable mode: each export is listed in ``outstanding`` until the stream acknowledged it.
    /// Before publishing anything new the thread publishes every outstanding export again, oldest
    /// first, whenever the connection broke or an acknowledgement failed (``republishIfNeeded``),
    /// so the stream stores this host's events in their order.
    private func runDurable() {
        var batch: [Event] = []
        var sizes: [Int] = []
        var payload = FieldWriter()
        var options = jsPubOptions()
        jsPubOptions_Init(&options)
        options.MaxWait = Self.acknowledgementWait
        var last = LastSubject()
        var numbers = ExportNumbers()
        // Events are taken from the queue only while connected, so while NATS is away they wait
        // in the bounded queue (its overflow announced), not in this thread's hands.
        while waitUntilConnected(), queue.take(max: 256, into: &batch, sizes: &sizes) {
            var index = 0
            holding.store(batch.count, ordering: .relaxed)
            defer { holding.store(0, ordering: .relaxed) }
            // An empty batch: woken for a re-publish or a reconnect.
            if batch.isEmpty, !republishIfNeeded(&options) { queue.pause(0.05) }
            while index < batch.count {
                holding.store(batch.count - index, ordering: .relaxed)
                if !waitUntilConnected() { return }
                guard republishIfNeeded(&options) else {
                    queue.pause(0.05)
                    continue
                }
                let event = batch[index]
                last.update(event.name, subjects)
                guard last.exportable else {
                    gaps.record(.publishFailed, count: 1, subject: event.name)
                    queue.release(sizes[index])
                    index += 1
                    continue
                }
                WireFormat.encode(event, instance: instance, previous: lastPublished, number: numbers.next(for: event.name), into: &payload)
                let export = OutstandingPublishes.Export(index: nextExport, subject: last.text, payload: payload.bytes,
                                                         sequence: event.sequence)
                // Swapped before publishing: the acknowledgement may come before the call returns.
                let inFlight = Self.inFlightBytes(payload.count)
                queue.exchange(released: sizes[index], held: inFlight)
                counters.inFlight.add(1, ordering: .relaxed)
                switch publish(export, &options, new: true) {
                case .inFlight:
                    numbers.commit()
                    nextExport += 1
                    lastPublished = event.sequence
                    index += 1
                    // A failed probe has everything outstanding published again (the handler
                    // asked for it), starting with another probe.
                    if probing, awaitStored(export.index) { probing = false }
                case .failed:
                    counters.inFlight.subtract(1, ordering: .relaxed)
                    queue.release(inFlight)
                    index += 1
                case .stalled, .disconnected:
                    // Published again (in its turn) once the window has room or the connection is back.
                    counters.inFlight.subtract(1, ordering: .relaxed)
                    queue.exchange(released: inFlight, held: sizes[index])
                }
            }
            lingerIfDrained(batch.count)
            batch.removeAll(keepingCapacity: true)
            sizes.removeAll(keepingCapacity: true)
        }
        // Stopping: what is in flight gets a moment to be acknowledged.
        var complete = jsPubOptions()
        jsPubOptions_Init(&complete)
        complete.MaxWait = 2_000
        if client.state == .connected { _ = republishIfNeeded(&options, stopping: true) }
        _ = js_PublishAsyncComplete(jetStream, &complete)
    }

    /// How long nats.c waits for a publish's acknowledgement (milliseconds); past it the
    /// acknowledgement counts as failed and everything outstanding is published again.
    static let acknowledgementWait: Int64 = 5_000

    /// Durable: the exports published and not yet acknowledged, in export order.
    private let outstanding = OutstandingPublishes()
    /// The next export's index in ``outstanding`` (exporter thread).
    private var nextExport: UInt64 = 1
    /// The sequence of the last event handed to nats.c (exporter thread): each payload names the
    /// one before it, so importers can put events the stream stored out of order back in order
    /// (``OriginOrder``). One nats.c refused outright is not named: it never reaches the stream.
    private var lastPublished: UInt64 = 0
    /// Set when the connection broke or an acknowledgement failed: everything outstanding is to
    /// be published again, in order, before anything new.
    private let republishNeeded = Atomic<Bool>(false)

    /// Publishes every outstanding export again, oldest first, if the connection broke or an
    /// acknowledgement failed since the last time. Returns false if it could not finish (the
    /// connection is down again); it starts over from the oldest next time.
    ///
    /// nats.c's own attempts are taken back first (`js_PublishAsyncGetPendingList`), so their
    /// late acknowledgements or timeouts no longer count and its window of unacknowledged
    /// publishes is free for the re-publish. The server drops what it had stored already (same
    /// message id, within `duplicate_window`).
    private func republishIfNeeded(_ options: inout jsPubOptions, stopping: Bool = false) -> Bool {
        guard republishNeeded.exchange(false, ordering: .relaxed) else { return true }
        probing = true
        var pending = natsMsgList()
        // nats.c 3.4 makes its list of pending publishes at the first one and reads it without
        // checking: asked before any publish it dereferences NULL.
        let taken = nextExport > 1 ? js_PublishAsyncGetPendingList(&pending, jetStream) : NATS_NOT_FOUND
        let exports = outstanding.restart()  // forgets the addresses before nats.c's copies are freed
        if taken == NATS_OK { natsMsgList_Destroy(&pending) }
        var index = 0
        while index < exports.count {
            switch publish(exports[index], &options, new: false) {
            case .inFlight:
                if probing {
                    guard awaitStored(exports[index].index, stopping: stopping) else {
                        republishNeeded.store(true, ordering: .relaxed)
                        return false
                    }
                    probing = false
                }
                index += 1
            case .failed:
                // Refused for good (announced by `publish`): no longer held.
                if let export = outstanding.giveUp(exports[index].index) { forget(export) }
                index += 1
            case .stalled:
                if queue.isStopped { return false }
            case .disconnected:
                republishNeeded.store(true, ordering: .relaxed)
                return false
            }
        }
        if index > 0 { counters.republished.add(UInt64(index), ordering: .relaxed) }
        return true
    }

    /// Set at start and whenever everything outstanding is published again: the next publish
    /// is a probe, and nothing after it is published until the stream stored it (exporter
    /// thread).
    ///
    /// Why: publishes are pipelined, and a stream that is not listening yet (a cluster that just
    /// elected the stream's leader, or whose servers have not yet told each other about it)
    /// answers "no responders" to the first ones while a later one, a moment after, is stored.
    /// Published again, the first ones would land behind it — out of the origin's order, and
    /// taken for copies by a host that met the later one first. Seen on a fresh three-server
    /// cluster: an origin's first 66 events refused and re-published behind its 67th, dropped by
    /// both importing hosts. One round trip per start, reconnect or failed acknowledgement.
    private var probing = true

    /// Waits until the stream answered the current attempt of export `index`; returns whether it
    /// stored it. A failed answer has asked for everything outstanding to be published again; so
    /// has a broken connection, which ends the wait too (its answer no longer counts). A stop
    /// ends it, except for the last publishes of a `stopping` exporter, whose probe waits up to
    /// 1 s (within the moment a clean stop gives them).
    private func awaitStored(_ index: UInt64, stopping: Bool = false) -> Bool {
        let deadline = ContinuousClock.now + .seconds(1)
        while outstanding.isAwaitingAnswer(index) {
            if republishNeeded.load(ordering: .relaxed) { return false }
            if queue.isStopped, !stopping || ContinuousClock.now >= deadline { return false }
            System.sleep(for: .microseconds(200))
        }
        return !outstanding.isOutstanding(index)
    }

    /// The message ids' buffer (exporter thread).
    private lazy var messageID = MessageID(host: subjects.host, instance: instance)

    private enum Published {
        /// nats.c has it until the stream acknowledges it (or the acknowledgement fails).
        case inFlight
        /// nats.c's window of unacknowledged publishes was full for its stall wait: try again.
        case stalled
        /// Not published: the connection is down or broke (everything outstanding is published
        /// again before it).
        case disconnected
        /// Refused for good, and announced.
        case failed
    }

    /// One attempt of `export`, asynchronously; `new`: its first (if it is not published, it is
    /// not outstanding either).
    private func publish(_ export: OutstandingPublishes.Export, _ options: inout jsPubOptions, new: Bool) -> Published {
        var message: OpaquePointer?
        let created = export.payload.withUnsafeBytes { bytes in
            natsMsg_Create(&message, export.subject, nil, bytes.baseAddress?.assumingMemoryBound(to: CChar.self), Int32(bytes.count))
        }
        guard created == NATS_OK, let attempt = message else {
            gaps.record(.publishFailed, count: 1, subject: export.subject, detail: BridgeError.text(created))
            return .failed
        }
        outstanding.attach(export, attempt: attempt)
        let status = messageID.withCString(export.sequence) { idPointer in
            options.MsgId = idPointer
            defer { options.MsgId = nil }
            return js_PublishMsgAsync(jetStream, &message, &options)
        }
        if status != NATS_OK {
            // Not taken: the message is ours again.
            outstanding.detach(attempt, forgetExport: new)
            natsMsg_Destroy(attempt)
        }
        switch status {
        case NATS_OK:
            return .inFlight
        case NATS_TIMEOUT:
            return .stalled
        case NATS_CONNECTION_CLOSED, NATS_CONNECTION_DISCONNECTED, NATS_NOT_YET_CONNECTED, NATS_INSUFFICIENT_BUFFER,
             NATS_IO_ERROR, NATS_STALE_CONNECTION:
            // Reconnecting (durable mode has no reconnect buffer: what went into it would reach
            // the next server before the re-publish of older exports), or a write failed (its
            // deadline passed on a hung server, the socket is shut) before nats.c noticed.
            republishNeeded.store(true, ordering: .relaxed)
            return .disconnected
        default:
            gaps.record(.publishFailed, count: 1, subject: export.subject, detail: BridgeError.text(status))
            return .failed
        }
    }

    private func waitUntilConnected() -> Bool {
        while true {
            while client.state != .connected {
                if queue.isStopped { return false }
                queue.pause(0.1)
            }
            guard needsStream.load(ordering: .relaxed), let ensureStream else { return true }
            do {
                try ensureStream()
                needsStream.store(false, ordering: .relaxed)
                lastError.withLock { $0 = nil }
                return true
            } catch {
                lastError.withLock { $0 = "\(error)" }
                if queue.isStopped { return false }
                // Each attempt already waited for the JetStream API (2 s): a stream whose
                // leader is being elected is asked again soon after it answers.
                queue.pause(0.25)
            }
        }
    }

    /// nats.c's reconnected callback: publish everything outstanding again before anything new,
    /// starting with a probe. The stream is not asked for first: in a cluster that answer comes
    /// from the stream's leader, which after a server death may take seconds to be elected, and
    /// a stream that is gone (a server restarted without its storage) answers the probe with
    /// "no responders", which has it checked and created.
    func reconnected() {
        republishNeeded.store(true, ordering: .relaxed)
        queue.wake()
    }

    let lastError = Mutex<String?>(nil)

    /// The bytes an outstanding export held are released; it no longer counts as in flight.
    private func forget(_ export: OutstandingPublishes.Export) {
        counters.inFlight.subtract(1, ordering: .relaxed)
        queue.release(Self.inFlightBytes(export.payload.count))
    }

    /// nats.c's publish-acknowledgement callback (its reply subscription's thread): an export the
    /// stream stored is no longer outstanding; a failed acknowledgement has everything outstanding
    /// published again, in order (``republishIfNeeded``). The answer to an attempt taken back
    /// from nats.c is ignored.
    func acknowledged(_ message: OpaquePointer?, _ ack: UnsafeMutablePointer<jsPubAck>?, _ error: UnsafeMutablePointer<jsPubAckErr>?) {
        guard let attempt = message ?? error?.pointee.Msg else {
            // nats.c always names the message (nats.h).
            gaps.record(.publishFailed, count: 1, subject: "?", detail: "a publish was answered and nats.c did not say which")
            return
        }
        if let ack {
            guard let export = outstanding.settle(attempt, stored: true) else { return }
            counters.exported.add(1, ordering: .relaxed)
            if ack.pointee.Duplicate { counters.duplicatesDroppedByServer.add(1, ordering: .relaxed) }
            forget(export)
            return
        }
        let status = error?.pointee.Err ?? NATS_ERR
        switch status {
        case NATS_NO_RESPONDERS, NATS_TIMEOUT, NATS_CONNECTION_CLOSED, NATS_CONNECTION_DISCONNECTED:
            // Not stored, or stored and the acknowledgement lost: everything outstanding is
            // published again, oldest first, with the same ids.
            guard outstanding.settle(attempt, stored: false) != nil else { return }
            if status == NATS_NO_RESPONDERS { needsStream.store(true, ordering: .relaxed) }  // no stream listens
            republishNeeded.store(true, ordering: .relaxed)
            queue.wake()
        default:
            guard let export = outstanding.settle(attempt, stored: true) else { return }
            let text = error?.pointee.ErrText.map { String(cString: $0) } ?? BridgeError.text(status)
            gaps.record(.publishFailed, count: 1, subject: export.subject, detail: text)
            forget(export)
        }
    }
}
