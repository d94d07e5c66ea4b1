import AsyncHTTPClient
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import SystemCalls

/// Rules' webhooks, delivered at least once across restarts and SIGKILLs: each accepted
/// delivery is in the log in `directory` until a receiver answered 2xx or the outbox gave up on it.
///
/// **What is retried.** 2xx is delivered; 408, 429 and 5xx, refused and reset connections and
/// an attempt with no answer within the delivery's `attemptTimeout` are retried; other 4xx and
/// 3xx fail at once ([AttemptVerdict](AttemptVerdict.swift)). Between attempts a delivery waits
/// per ``WebhookBackoff`` (exponential, full jitter, capped; `Retry-After` honoured), holding no
/// slot. Every attempt carries the delivery's `id` as `Idempotency-Key`, the same on every retry
/// and in every life. After `maxAttempts` attempts in one life it fails; a delivery recovered
/// from disk starts counting again (its count is not written back, which would cost a sync per
/// retry).
///
/// **Bounds.** At most `capacity` deliveries are stored at once (waiting, in flight or waiting to
/// retry; what a previous life left counts, and may exceed it): ``enqueue(_:)`` past that drops
/// the delivery, counts it and reports it. A body over ``maximumBodySize`` is dropped the same
/// way. At most `concurrency` attempts run at once, across all receivers: a receiver that hangs
/// holds one slot until the attempt's timeout, then waits its backoff without one — it costs
/// retries, never an enqueue, another delivery's slot beyond its own or a host thread.
///
/// **Threads.** ``enqueue(_:)`` appends the delivery to the log and waits for its sync on the
/// caller's thread (any thread; enqueues at the same time share one sync) and takes the outbox's
/// lock only to count and queue. Everything else — starting attempts, their connections (AsyncHTTPClient,
/// HTTP/1.1 or HTTP/2 over TLS), answers, timers for retries, done records, reports — runs
/// on the outbox's own event loop: one thread (`webhook-outbox`) of a SwiftNIO group the outbox
/// starts in ``start()`` and shares with nobody, so a flood of webhooks never takes a Dispatch or
/// cooperative thread. ``shutdown(within:)`` is awaited from any task.
///
/// **Disk.** An append-only log in segments with group commit, a length and CRC-32 per record,
/// compacted as it goes and at each start ([OutboxLog](OutboxLog.swift)); the folder is 0700,
/// the segments 0600.
public final class WebhookOutbox: Sendable {
    /// The largest body ``enqueue(_:)`` accepts: 1 MiB. A webhook is a notice, not a transfer,
    /// and `capacity` deliveries of this size must fit the state directory.
    public static let maximumBodySize = 1 << 20
    /// How many of an answer's last body bytes ``WebhookReport/delivered(_:status:attempts:duration:responseTail:)`` carries.
    public static let responseTailBytes = 512

    private let directory: String
    private let capacity: Int
    private let concurrency: Int
    private let backoff: WebhookBackoff
    private let logger: Logger
    private let report: @Sendable (WebhookReport) -> Void
    private let state = NIOLockedValueBox(State())

    /// What ``start()`` makes: the log, the event loop and the client on it.
    private struct Engine: Sendable {
        let log: OutboxLog
        let group: MultiThreadedEventLoopGroup
        let loop: any EventLoop
        let client: HTTPClient
    }

    /// A stored delivery and its attempts in this life.
    private struct Entry: Sendable {
        let sequence: UInt64
        let delivery: WebhookDelivery
        var attempts = 0
        var firstStart: ContinuousClock.Instant?
    }

    private struct State {
        enum Phase { case created, running, stopping, stopped }
        var phase = Phase.created
        var engine: Engine?
        var nextSequence: UInt64 = 1
        /// Deliveries on disk and not done (``WebhookStatistics/pending``): counted against the
        /// capacity from before their record is written.
        var stored = 0
        /// Waiting for a slot, oldest first.
        var ready = CircularBuffer<Entry>()
        /// Slots taken, and the attempts in them by sequence number (for the shutdown to cancel).
        var busy = 0
        var inFlight: [UInt64: HTTPClient.Task<ResponseTail.Answer>] = [:]
        /// Deliveries waiting to retry, by sequence number.
        var waiting: [UInt64: Scheduled<Void>] = [:]
        var statistics = WebhookStatistics()
        /// Completed by the last attempt to end once the shutdown began.
        var drained: EventLoopPromise<Void>?
    }

    /// An outbox on `directory` (created by ``start()`` with mode 0700, parents included).
    /// `capacity`: deliveries stored at most; `concurrency`: attempts at once (both at least 1).
    /// `report` is told what becomes of each delivery ([WebhookReport](WebhookReport.swift) says
    /// on which thread). `backoff`: the waits between attempts.
    public init(directory: String, capacity: Int, concurrency: Int, logger: Logger,
                backoff: WebhookBackoff = WebhookBackoff(),
                report: @escaping @Sendable (WebhookReport) -> Void) {
        precondition(capacity >= 1 && concurrency >= 1, "a webhook outbox needs a capacity and a concurrency of at least 1")
        self.directory = directory
        self.capacity = capacity
        self.concurrency = concurrency
        self.backoff = backoff
        self.logger = logger
        self.report = report
    }

    /// Creates the folder (0700), reads what a previous life left — ignoring a record the last
    /// write of that life did not finish, logging and setting aside a damaged segment — and starts
    /// delivering it, oldest first, reporting ``WebhookReport/recovered(count:)`` when there was
    /// any. Call once; call ``shutdown(within:)`` at the end whether or not this succeeded.
    public func start() throws(WebhookOutboxError) {
        precondition(state.withLockedValue { $0.phase } == .created, "WebhookOutbox.start() called twice or after shutdown")
        let log = try OutboxLog(path: directory, logger: logger)
        let (found, highestSequence) = try log.recover()
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        loop.execute { System.nameCurrentThread("webhook-outbox") }
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        // The pool's limit per receiver is the outbox's own bound on attempts; a refused
        // connection fails its attempt at once, for the outbox's backoff to space the next,
        // instead of the pool retrying it until the attempt's deadline.
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: concurrency)
        configuration.connectionPool.retryConnectionEstablishment = false
        let client = HTTPClient(eventLoopGroup: group, configuration: configuration, backgroundActivityLogger: logger)
        let engine = Engine(log: log, group: group, loop: loop, client: client)
        state.withLockedValue { state in
            state.engine = engine
            state.phase = .running
            state.stored = found.count
            state.nextSequence = highestSequence + 1
            for stored in found { state.ready.append(Entry(sequence: stored.sequence, delivery: stored.delivery)) }
        }
        if !found.isEmpty {
            logger.notice("webhook outbox recovered \(found.count) deliveries", metadata: ["path": "\(directory)"])
            report(.recovered(count: found.count))
        }
        loop.execute { self.startAttempts() }
    }

    /// Stores `delivery` and returns true once it is durable on disk: from then on it is sent
    /// until delivered or given up, in this life or the next. False when it was dropped —
    /// the outbox is full, the body is over ``maximumBodySize``, the URL is not http(s) with a
    /// host, a header or the key cannot be sent in HTTP, or the log could not be written —
    /// counted in ``WebhookStatistics/dropped`` and reported; also before ``start()`` succeeded
    /// and once ``shutdown(within:)`` has returned. Any thread. While the shutdown runs it still
    /// stores, for the next life.
    public func enqueue(_ delivery: WebhookDelivery) -> Bool {
        if let refusal = Self.refusal(of: delivery) { return drop(delivery, reason: refusal) }
        let reserved: Result<(engine: Engine, sequence: UInt64), Refusal> = state.withLockedValue { state in
            guard state.phase != .stopped else { return .failure(Refusal(reason: "the outbox has stopped")) }
            guard let engine = state.engine else { return .failure(Refusal(reason: "the outbox has not started")) }
            guard state.stored < capacity else { return .failure(Refusal(reason: "outbox full (\(capacity) deliveries)")) }
            state.stored += 1
            defer { state.nextSequence += 1 }
            return .success((engine, state.nextSequence))
        }
        let engine: Engine, sequence: UInt64
        switch reserved {
        case .success(let place): (engine, sequence) = place
        case .failure(let refusal): return drop(delivery, reason: refusal.reason)
        }
        do {
            try engine.log.append(delivery, sequence: sequence)
        } catch {
            state.withLockedValue { $0.stored -= 1 }
            logger.error("webhook outbox cannot store a delivery: \(error)", metadata: ["rule": "\(delivery.rule)", "id": "\(delivery.id)"])
            return drop(delivery, reason: "cannot store: \(error)")
        }
        let queued = state.withLockedValue { state in
            guard state.phase == .running else { return false }
            state.ready.append(Entry(sequence: sequence, delivery: delivery))
            return true
        }
        if queued { engine.loop.execute { self.startAttempts() } }
        return true
    }

    /// Stops: no new attempt starts, waits to retry are cancelled, attempts in flight get until
    /// `within` to end and are then cancelled. What was not delivered stays on disk for the next
    /// life. Then the connections, the event loop and the log are closed, and another outbox may
    /// open the folder. A second call returns at once.
    public func shutdown(within: Duration) async {
        let stopping: (engine: Engine, timers: [Scheduled<Void>])? = state.withLockedValue { state in
            guard state.phase == .running, let engine = state.engine else {
                if state.phase == .created { state.phase = .stopped }
                return nil
            }
            state.phase = .stopping
            state.ready.removeAll()
            defer { state.waiting.removeAll() }
            return (engine, Array(state.waiting.values))
        }
        guard let (engine, timers) = stopping else { return }
        timers.forEach { $0.cancel() }
        let drained = engine.loop.makePromise(of: Void.self)
        state.withLockedValue { state in
            if state.busy == 0 { drained.succeed() } else { state.drained = drained }
        }
        let deadline = engine.loop.scheduleTask(in: .nanoseconds(within.nanoseconds)) {
            self.state.withLockedValue { $0.inFlight.values }.forEach { $0.cancel() }
        }
        try? await drained.futureResult.get()
        deadline.cancel()
        do { try await engine.client.shutdown() } catch {
            logger.warning("webhook outbox: closing the HTTP client: \(error)")
        }
        do { try await engine.group.shutdownGracefully() } catch {
            logger.warning("webhook outbox: stopping its event loop: \(error)")
        }
        state.withLockedValue { $0.phase = .stopped }
        engine.log.close()
    }

    /// The counts of this life, and what is pending now.
    public var statistics: WebhookStatistics {
        state.withLockedValue { state in
            var statistics = state.statistics
            statistics.pending = state.stored
            return statistics
        }
    }

    // MARK: - On the event loop

    /// Fills free slots from the ready queue.
    private func startAttempts() {
        let (engine, starting): (Engine?, [Entry]) = state.withLockedValue { state in
            var starting: [Entry] = []
            while state.phase == .running, state.busy < concurrency, var entry = state.ready.popFirst() {
                state.busy += 1
                entry.attempts += 1
                state.statistics.attempts += 1
                if entry.attempts > 1 { state.statistics.retries += 1 }
                if entry.firstStart == nil { entry.firstStart = .now }
                starting.append(entry)
            }
            return (state.engine, starting)
        }
        guard let engine else { return }
        for entry in starting { attempt(entry, engine: engine) }
    }

    private func attempt(_ entry: Entry, engine: Engine) {
        let delivery = entry.delivery
        report(.started(delivery, attempt: entry.attempts))
        let request: HTTPClient.Request
        do {
            request = try Self.request(for: delivery)
        } catch {
            // Only a delivery recovered from disk can get here: enqueue refuses these.
            finish(entry, .fail(reason: "cannot be sent: \(error)"), engine: engine)
            return
        }
        let task = engine.client.execute(request: request, delegate: ResponseTail(limit: Self.responseTailBytes),
                                         eventLoop: .delegateAndChannel(on: engine.loop),
                                         deadline: .now() + .nanoseconds(delivery.attemptTimeout.nanoseconds))
        // The task's callbacks run on this same loop, so it is recorded before any can end it.
        state.withLockedValue { $0.inFlight[entry.sequence] = task }
        task.futureResult.whenComplete { result in
            switch result {
            case .success(let answer):
                self.finish(entry, AttemptVerdict(status: answer.status, headers: answer.headers), engine: engine,
                            tail: answer.tail)
            case .failure(let error):
                self.finish(entry, AttemptVerdict(error: error, timeout: delivery.attemptTimeout), engine: engine)
            }
        }
    }

    private func finish(_ entry: Entry, _ verdict: AttemptVerdict, engine: Engine, tail: [UInt8] = []) {
        let delivery = entry.delivery
        let stopping = state.withLockedValue { $0.phase != .running }
        var outcome: WebhookReport?
        switch verdict {
        case .retry where stopping:
            // Cancelled by the shutdown, or failed during it: it stays pending for the next life.
            outcome = nil
        case .delivered(let status):
            engine.log.markDone(entry.sequence)
            outcome = .delivered(delivery, status: status, attempts: entry.attempts,
                                 duration: ContinuousClock.now - (entry.firstStart ?? .now),
                                 responseTail: String(decoding: tail, as: UTF8.self))
        case .fail(let reason):
            engine.log.markDone(entry.sequence)
            outcome = .failed(delivery, reason: reason, attempts: entry.attempts)
        case .retry(let reason, _) where entry.attempts >= delivery.maxAttempts:
            engine.log.markDone(entry.sequence)
            outcome = .failed(delivery, reason: "gave up after \(entry.attempts) attempts: \(reason)", attempts: entry.attempts)
        case .retry(let reason, let retryAfter):
            var generator = SystemRandomNumberGenerator()
            let delay = backoff.delay(after: entry.attempts, retryAfter: retryAfter, using: &generator)
            outcome = .retrying(delivery, attempt: entry.attempts, reason: reason, delay: delay)
        }
        let (told, drained): (WebhookReport?, EventLoopPromise<Void>?) = state.withLockedValue { state in
            state.busy -= 1
            state.inFlight[entry.sequence] = nil
            switch outcome {
            case .delivered:
                state.stored -= 1
                state.statistics.delivered += 1
            case .failed:
                state.stored -= 1
                state.statistics.failed += 1
            case .retrying(_, _, _, let delay) where state.phase == .running:
                state.waiting[entry.sequence] = engine.loop.scheduleTask(in: .nanoseconds(delay.nanoseconds)) {
                    self.retryDue(entry)
                }
            default:
                // The shutdown began since: it stays pending for the next life.
                outcome = nil
            }
            guard state.phase == .stopping, state.busy == 0 else { return (outcome, nil) }
            defer { state.drained = nil }
            return (outcome, state.drained)
        }
        switch told {
        case .failed(_, let reason, let attempts):
            logger.warning("webhook failed after \(attempts) attempts: \(reason)",
                           metadata: ["rule": "\(delivery.rule)", "id": "\(delivery.id)", "url": "\(delivery.url)"])
        case .retrying(_, let attempt, let reason, let delay):
            logger.debug("webhook attempt \(attempt) failed, retrying in \(delay): \(reason)",
                         metadata: ["rule": "\(delivery.rule)", "id": "\(delivery.id)"])
        default:
            break
        }
        if let told { report(told) }
        drained?.succeed()
        startAttempts()
    }

    private func retryDue(_ entry: Entry) {
        let queued = state.withLockedValue { state in
            guard state.waiting.removeValue(forKey: entry.sequence) != nil, state.phase == .running else { return false }
            state.ready.append(entry)
            return true
        }
        if queued { startAttempts() }
    }

    // MARK: - Requests

    /// The request for `delivery`: its method, URL, headers in order (without a configured
    /// `Idempotency-Key`), then `Idempotency-Key: id`, and its body.
    private static func request(for delivery: WebhookDelivery) throws -> HTTPClient.Request {
        var headers = HTTPHeaders()
        for header in delivery.headers where header.name.lowercased() != "idempotency-key" {
            headers.add(name: header.name, value: header.value)
        }
        headers.add(name: "Idempotency-Key", value: delivery.id)
        return try HTTPClient.Request(url: delivery.url, method: HTTPMethod(rawValue: delivery.method), headers: headers,
                                      body: delivery.body.isEmpty ? nil : .bytes(delivery.body))
    }

    /// Why `delivery` can never be sent, checked before it is stored — retrying would not change it.
    private static func refusal(of delivery: WebhookDelivery) -> String? {
        if delivery.body.count > maximumBodySize {
            return "body of \(delivery.body.count) bytes is over \(maximumBodySize)"
        }
        guard delivery.maxAttempts >= 1, delivery.attemptTimeout > .zero else {
            return "maxAttempts and attemptTimeout must be positive"
        }
        guard delivery.url.hasPrefix("http://") || delivery.url.hasPrefix("https://") else {
            return "not an http(s) URL: \(delivery.url)"
        }
        guard isToken(delivery.method) else { return "not an HTTP method: \(delivery.method)" }
        guard !delivery.id.isEmpty, isFieldValue(delivery.id) else { return "the id cannot be an Idempotency-Key" }
        for header in delivery.headers where !isToken(header.name) || !isFieldValue(header.value) {
            return "header \(header.name) cannot be sent in HTTP"
        }
        do { _ = try request(for: delivery) } catch { return "not a URL with a host: \(delivery.url) (\(error))" }
        return nil
    }

    /// RFC 9110's `token`: what a method and a header name are made of.
    private static func isToken(_ text: String) -> Bool {
        !text.isEmpty && text.utf8.allSatisfy { byte in
            (0x30...0x39).contains(byte) || (0x41...0x5A).contains(byte) || (0x61...0x7A).contains(byte)
                || "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }

    /// No CR, LF or NUL: what would split or end a header.
    private static func isFieldValue(_ text: String) -> Bool {
        !text.utf8.contains { $0 == 0x0D || $0 == 0x0A || $0 == 0x00 }
    }

    private struct Refusal: Error {
        var reason: String
    }

    private func drop(_ delivery: WebhookDelivery, reason: String) -> Bool {
        state.withLockedValue { $0.statistics.dropped += 1 }
        report(.dropped(delivery, reason: reason))
        return false
    }
}
