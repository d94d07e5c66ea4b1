import CNATS
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import Synchronization

/// Bridges the local bus to other hosts through NATS: local events matching `export` leave as
/// `<prefix>.<host>.<name>`, remote events matching `import` are posted on the local bus with
/// their origin (``EventOrigin``).
///
/// ## Threads
/// - **Exports leave the bus** through a bus subscription whose sink runs on the bus's delivery
///   loop and only appends to the bounded ``ExportQueue``; the ``Exporter``'s own thread takes
///   batches from it and publishes. A stalled NATS never slows the bus.
/// - **Imports enter the bus** from nats.c's delivery thread of each subscription (core,
///   ``CoreImporter``) or from the ``DurableImporter``'s thread (durable). `Bus.post` is safe
///   from any thread; each module still receives on its own mailbox queue.
/// - nats.c's connection-callback thread reports disconnects, reconnects and slow consumers;
///   those callbacks only record and flag.
/// - A serial *monitor* queue announces recorded losses as `bridge.gap` every 250 ms and
///   refreshes the lag for status.
/// - ``start()`` and ``stop(timeout:)`` are called by the host on its control queue.
///
/// ## Loops
/// Events with an origin (imported) are never exported, and `bridge.*` events (this host's own
/// reports) neither; a host's own events coming back are dropped by comparing the subject's host
/// token. So hosts that all export and import `>` each see every event once.
public final class NATSBridge: @unchecked Sendable {
    // @unchecked: the parts are set in `start` and cleared in `stop`, both on the host's control
    // queue; other threads only read them after `start` returned, through `parts`' lock.

    public let config: BridgeConfig
    private let bus: Bus
    private let stateDirectory: String
    private let logger: Logger
    private let counters = BridgeCounters()
    private let gaps = GapBook()
    private let subjects: Subjects
    private let monitorQueue = DispatchQueue(label: "eventbus.bridge.monitor")
    private let disconnectedAt = Mutex<Date?>(nil)
    /// Imports dropped over their origin's share, per origin (monitor queue writes, status reads).
    private let overShare = Mutex(OverShareCounts())
    private let stopped = Atomic<Bool>(false)

    private struct Parts {
        var client: NATSClient?
        /// The bridge's hold on the JetStream context, released at stop once the connection is closed.
        var jetStream: JetStreamContext?
        var queue: ExportQueue?
        var exporter: Exporter?
        var exportSubscription: AnyCancellable?
        var core: CoreImporter?
        var durable: DurableImporter?
        var monitor: DispatchSourceTimer?
    }
    private let parts = Locked<Parts>(Parts())

    public init(config: BridgeConfig, bus: Bus, stateDirectory: String, logger: Logger) {
        self.config = config
        self.bus = bus
        self.stateDirectory = stateDirectory
        self.logger = logger
        self.subjects = Subjects(prefix: config.subjectPrefix, host: config.host)
    }

    /// Connects (in the background if no server answers yet), subscribes and starts exporting.
    /// Throws for what will not get better by waiting: options nats.c refuses, an unwritable
    /// state directory, a stream that exists with other subjects.
    public func start() throws(BridgeError) {
        let instance = try BridgeInstance.next(stateDirectory: stateDirectory, host: config.host)
        let ackClosure = AckRelay()
        let client = try NATSClient(config: config, name: "eventbusd \(config.host)", events: NATSClient.Events(
            disconnected: { [weak self] in self?.disconnected() },
            reconnected: { [weak self] in self?.reconnected() },
            closed: {},
            error: { [weak self] status, _ in
                if status != NATS_SLOW_CONSUMER { self?.logger.warning("bridge: NATS error: \(BridgeError.text(status))") }
            }))
        var jetStream: OpaquePointer?
        if config.durable != nil {
            var options = jsOptions()
            jsOptions_Init(&options)
            options.PublishAsync.MaxPending = 4_096
            options.PublishAsync.AckHandler = { _, message, ack, error, closure in
                Unmanaged<AckRelay>.fromOpaque(closure!).takeUnretainedValue().exporter?.acknowledged(message, ack, error)
                // With an AckHandler the published message is ours to destroy (nats.h): a failed
                // one is published again from a copy of its bytes, never resent as is.
                natsMsg_Destroy(message)
            }
            options.PublishAsync.AckHandlerClosure = Unmanaged.passRetained(ackClosure).toOpaque()
            options.PublishAsync.StallWait = 100
            // JetStream API requests (stream info, consumer create): a request lost with a server
            // that died is retried after 2 s instead of nats.c's 5.
            options.Wait = 2_000
            // nats.c builds its API prefix from the domain while making the context.
            let domain = config.durable?.domain.map { strdup($0)! }
            defer { free(domain) }
            options.Domain = domain.map { UnsafePointer($0) }
            try BridgeError.check(natsConnection_JetStream(&jetStream, client.connection, &options), .jetStream,
                                  "JetStream context\(config.durable?.domain.map { " (domain \($0))" } ?? "")")
        }
        let context = jetStream.map(JetStreamContext.init)
        let queue = ExportQueue(capacity: config.exportBuffer, byteCapacity: config.exportBufferBytes, gaps: gaps)
        var ensureStream: (() throws -> Void)?
        if let durable = config.durable, let jetStream {
            let setup = JetStreamSetup(jetStream: jetStream, durable: durable, subjects: subjects, consumer: "")
            let logger = logger
            ensureStream = {
                let (_, _, note) = try setup.ensureStream()
                if let note { logger.notice("bridge: \(note)") }
            }
        }
        let exporter = Exporter(queue: queue, client: client, subjects: subjects, instance: instance, counters: counters,
                                gaps: gaps, jetStream: context, ensureStream: ensureStream)
        ackClosure.exporter = exporter
        var core: CoreImporter?
        var durableImporter: DurableImporter?
        do {
            if !config.import.isEmpty {
                if let durable = config.durable, let context {
                    let setup = JetStreamSetup(jetStream: context.pointer, durable: durable, subjects: subjects,
                                               consumer: durable.consumer ?? "eventbus-\(config.host)")
                    durableImporter = try DurableImporter(client: client, setup: setup, context: context, bus: bus, subjects: subjects,
                                                          patterns: config.import, counters: counters, gaps: gaps,
                                                          logger: logger, stateDirectory: stateDirectory)
                } else {
                    let importer = CoreImporter(client: client, bus: bus, subjects: subjects, patterns: config.import,
                                                counters: counters, gaps: gaps, pendingLimit: config.pendingLimit,
                                                pendingBytes: config.pendingBytes)
                    try importer.start()
                    core = importer
                }
            }
        } catch {
            core?.stop()
            client.close()
            context?.release()  // no thread holds it yet
            throw error
        }
        exporter.start()
        durableImporter?.start()
        var exportSubscription: AnyCancellable?
        if !config.export.isEmpty {
            exportSubscription = bus.publisher(for: config.export).sink { event in
                // On the bus's delivery loop: never re-export, never block.
                guard Exporter.isExported(event) else { return }
                queue.offer(event)
            }
        }
        let monitor = DispatchSource.makeTimerSource(queue: monitorQueue)
        monitor.schedule(deadline: .now() + .milliseconds(250), repeating: .milliseconds(250))
        monitor.setEventHandler { [weak self] in self?.tick() }
        monitor.resume()
        parts.withLock {
            $0 = Parts(client: client, jetStream: context, queue: queue, exporter: exporter, exportSubscription: exportSubscription,
                       core: core, durable: durableImporter, monitor: monitor)
        }
        logger.info("bridge: host \(config.host) (instance \(instance)), \(config.durable == nil ? "core NATS (at-most-once)" : "JetStream stream \(config.durable!.stream)\(config.durable!.domain.map { " in domain \($0)" } ?? "")"), servers \(config.servers.joined(separator: ", ")); export \(config.export.map(\.description)), import \(config.import.map(\.description))")
    }

    /// Stops exporting (publishing what is queued, at most `timeout`), stops importing, closes
    /// the connection and announces what is left. The exporter's and durable importer's threads
    /// are waited for at most `timeout` each; one still inside nats.c then ends by itself once
    /// the closed connection lets it, and the JetStream context lives until it has
    /// (``JetStreamContext``).
    public func stop(timeout: Duration = .seconds(2)) {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        let current = parts.withLock { $0 }
        current.exportSubscription?.cancel()
        current.queue?.stop()
        if let exporter = current.exporter, !exporter.join(timeout: timeout) {
            logger.warning("bridge: \(current.queue?.count ?? 0) export(s) not published within \(timeout)")
        } else if let left = current.queue?.count, left > 0 {
            logger.warning("bridge: \(left) export(s) not published: NATS was not reachable when the host stopped")
        }
        current.durable?.stop(timeout: timeout)
        current.core?.stop()
        current.monitor?.cancel()
        monitorQueue.sync { tick() }
        current.client?.close()
        current.durable?.release()
        // Destroyed now unless the exporter's or the durable importer's thread outlived its wait
        // above: then by that thread as it ends (see JetStreamContext).
        current.jetStream?.release()
        logger.info("bridge: stopped (\(counters.exported.load(ordering: .relaxed)) exported, \(counters.imported.load(ordering: .relaxed)) imported)")
    }

    // MARK: nats.c callbacks (its connection-callback thread)

    private func disconnected() {
        counters.disconnects.add(1, ordering: .relaxed)
        disconnectedAt.withLock { if $0 == nil { $0 = Date() } }
        logger.warning("bridge: disconnected from NATS; reconnecting")
        parts.withLock({ $0.exporter })?.connectionBroke()
    }

    private func reconnected() {
        let current = parts.withLock { $0 }
        let since = disconnectedAt.withLock { value in
            defer { value = nil }
            return value
        }
        guard let since else { return }  // the first connection (retry on failed connect)
        counters.reconnects.add(1, ordering: .relaxed)
        logger.notice("bridge: reconnected to NATS after \(String(format: "%.1f", Date().timeIntervalSince(since))) s")
        current.queue?.wake()
        current.exporter?.reconnected()
        if let durable = current.durable {
            durable.reconnected()
        } else if let core = current.core {
            // Core NATS kept nothing for us while we were away: say so, count unknown.
            var record = GapRecord(kind: .disconnected)
            record.subjects = core.filters
            record.from = since
            record.until = Date()
            gaps.record(record)
        }
    }

    // MARK: Monitor queue

    private func tick() {
        let current = parts.withLock { $0 }
        if let core = current.core { counters.importLag.store(core.poll(), ordering: .relaxed) }
        for (record, detail) in gaps.take() {
            let gap = record.gap(host: config.host)
            var announced = gap
            if !record.kind.countIsExact { announced.dropped = nil }
            if record.kind.countsAsLost { counters.lost.add(UInt64(record.count), ordering: .relaxed) }
            if record.kind == .missed { counters.missed.add(UInt64(record.count), ordering: .relaxed) }
            if record.kind == .overShare { overShare.withLock { $0.add(record.count, of: record.origin) } }
            counters.gaps.add(1, ordering: .relaxed)
            let what = record.kind == .importRefused ? "\(record.count) import(s) refused"
                : announced.dropped.map { "\($0) event(s) lost\(record.origin.map { " of \($0)'s exports" } ?? "")" } ?? "events may be lost"
            logger.warning("bridge: \(record.kind.rawValue): \(what) (\(record.subjects.joined(separator: ", ")))\(detail.map { ": \($0)" } ?? "")")
            bus.post(announced.event)
        }
    }

    // MARK: Status

    public var statistics: BridgeStatistics {
        let current = parts.withLock { $0 }
        let state = stopped.load(ordering: .relaxed) ? "stopped" : (current.client?.state.name ?? "starting")
        let origins = current.durable?.origins.withLock { $0 } ?? [:]
        var statistics = BridgeStatistics(
            host: config.host, mode: config.durable == nil ? "core" : "durable", state: state, servers: config.servers,
            exported: counters.exported.load(ordering: .relaxed), exportQueued: (current.queue?.count ?? 0) + (current.exporter?.holding.load(ordering: .relaxed) ?? 0),
            exportInFlight: counters.inFlight.load(ordering: .relaxed), exportQueuedBytes: max(0, current.queue?.bytes ?? 0),
            imported: counters.imported.load(ordering: .relaxed),
            importLag: counters.importLag.load(ordering: .relaxed), echoesDropped: counters.echoesDropped.load(ordering: .relaxed),
            redeliveriesDropped: counters.redeliveriesDropped.load(ordering: .relaxed),
            duplicatesDroppedByServer: counters.duplicatesDroppedByServer.load(ordering: .relaxed),
            outOfOrder: counters.outOfOrder.load(ordering: .relaxed), lost: counters.lost.load(ordering: .relaxed),
            gaps: counters.gaps.load(ordering: .relaxed), disconnects: counters.disconnects.load(ordering: .relaxed),
            reconnects: counters.reconnects.load(ordering: .relaxed), malformed: counters.malformed.load(ordering: .relaxed),
            origins: origins.mapValues { ($0.instance, $0.sequence) },
            lastError: current.durable?.lastErrorDescription ?? current.exporter?.lastError.withLock { $0 })
        statistics.importUnrecorded = counters.importUnrecorded.load(ordering: .relaxed)
        statistics.exportRepublished = counters.republished.load(ordering: .relaxed)
        statistics.consumersRemade = counters.consumersRemade.load(ordering: .relaxed)
        statistics.reordered = counters.reordered.load(ordering: .relaxed)
        statistics.missed = counters.missed.load(ordering: .relaxed)
        statistics.overShare = overShare.withLock { $0.byOrigin }
        return statistics
    }
}

/// Carries nats.c's publish acknowledgements to the exporter, which exists only after the
/// JetStream context (whose options name the callback) is made. Retained for good (one small
/// object per bridge start): nats.c may call back while the bridge is stopping. It holds the
/// exporter weakly, so that what the exporter holds — the client and its connection — is freed
/// with the stopped bridge rather than kept for the life of the process; an acknowledgement
/// that arrives after that has no exporter left to tell and is dropped.
private final class AckRelay: @unchecked Sendable {
    // @unchecked: `exporter` is set once, before the first publish (weak references are cleared
    // atomically by the runtime).
    weak var exporter: Exporter?
}
