import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import ModuleIsolation
import ModuleLoading
import Synchronization
import SystemCalls

/// The worker's side: loads one module, gives it a ``ModuleContext`` whose bus forwards to the
/// host (``BusRemote``), and runs it.
///
/// ## Threads
/// - The **main thread** reads the socket (``run()``): it hands each batch of events to the
///   local bus (one lock per batch), which routes each to its subscription and so to the
///   module's mailbox; and it queues the host's calls (activate, reconfigure, deactivate) on
///   that mailbox.
/// - The module's **mailbox queue** — a serial queue — runs all module code: activate, every
///   pipeline, reconfigure, deactivate. Pipelines never see concurrent calls, as in the host.
///   After each batch a marker on that queue reports progress (events handled so far, at most
///   once a millisecond), which is also the heartbeat: a module stuck in a handler stops it,
///   and the host kills the worker.
/// - The channel's **writer thread** sends posts, log lines and subscriptions, batched; the
///   progress report after a batch is written by the module's queue itself when no write is in
///   progress (one thread hand-over less per batch).
/// - A timer on a utility queue queues a heartbeat marker when no batch did for a while.
///
/// Flow control is the host's: it counts what it sent against the module's mailbox bounds
/// (`window` events, `windowBytes` bytes) until the progress reports say it was handled, and
/// drops, counts and announces past them, as for in-process modules. So the worker reads all it
/// is sent, and reports at once — not only once a millisecond — when what it handled since its
/// last report reaches half of either bound: the host's mailbox then has room again without
/// waiting for the next report.
final class WorkerRuntime: BusRemote, @unchecked Sendable {
    private let channel: FrameChannel
    private let name: String
    private var mailbox: Mailbox?
    private var context: ModuleContext?
    private var module: ModuleBox?
    private var heartbeat: DispatchSourceTimer?

    // The module's mailbox bounds, from the host's `start`; read on the module's queue.
    private var window: UInt64 = 10_000
    private var windowBytes = Mailbox.defaultByteCapacity
    /// A heartbeat marker is queued on the module's queue and has not run yet.
    private let heartbeatQueued = Atomic<Bool>(false)

    // Acknowledgements waiting for the host.
    private let acknowledgements = NSCondition()
    private var nextAcknowledgement: Int64 = 0
    private var acknowledged: [Int64: String?] = [:]

    init(socket: Int32, name: String) {
        self.name = name
        self.channel = FrameChannel(fd: socket, name: "module-worker")
    }

    /// Reads until the host closes the socket (or dies). Returns the process exit status.
    func run() -> Int32 {
        channel.start()
        let reason = channel.readFrames { type, payload in try handle(type, payload) }
        // The host went away or told us to go: nothing here outlives it.
        _ = reason
        return 0
    }

    private func handle(_ type: FrameType, _ payload: UnsafeRawBufferPointer) throws {
        switch type {
        case .events:
            var decoder = WireDecoder(payload)
            let count = Int(try decoder.integer(UInt32.self))
            var batch: [(subscription: UInt64, event: Event)] = []
            batch.reserveCapacity(min(count, 65_536))
            for _ in 0..<count {
                let subscription = try decoder.integer(UInt64.self)
                batch.append((subscription, try decoder.event()))
            }
            deliver(batch)
        case .start:
            try start(try JSON.frame(payload))
        case .reconfigure:
            let section = try JSON.frame(payload)["config"] ?? [:]
            mailbox?.perform { [self] in
                var answer: JSON
                // Checked against the declaration before the module is asked (see `start`).
                let keys = Swift.type(of: module!.module).configKeys
                let config = ModuleConfig(json: section, keys: keys)
                let problems = keys.check(config.values)
                guard problems.isEmpty else {
                    channel.send { $0.append(.reconfigured, json: .object(ConfigProblemsWire.encode(problems, keysSummary: keys.summary))) }
                    return
                }
                do {
                    switch try module!.module.reconfigure(config, context: context!) {
                    case .applied:
                        context!.config = config
                        answer = ["result": "applied"]
                    case .reactivate:
                        answer = ["result": "reactivate"]
                    }
                } catch {
                    answer = ["result": "threw", "message": .string("\(error)")]
                }
                channel.send { $0.append(.reconfigured, json: answer) }
            }
        case .deactivate:
            mailbox?.perform { [self] in
                module?.module.deactivate()
                if let context {
                    for cancellable in context.cancellables { cancellable.cancel() }
                    context.cancellables.removeAll()
                }
                channel.send { $0.append(.deactivated, json: [:]) }
            }
        case .acknowledged:
            let json = try JSON.frame(payload)
            acknowledgements.withLock {
                acknowledged[json["id"]?.intValue ?? -1] = .some(json["error"]?.stringValue)
                acknowledgements.broadcast()
            }
        default:
            throw WireError("the host sent a worker frame (\(type))")
        }
    }

    private func start(_ json: JSON) throws {
        window = UInt64(max(1, json["window"]?.intValue ?? 10_000))
        windowBytes = Int(max(1, json["window_bytes"]?.intValue ?? Int64(Mailbox.defaultByteCapacity)))
        let path = json["path"]?.stringValue ?? ""
        let library: LoadedLibrary
        do {
            library = try ModuleLoader().load(path)
        } catch {
            // Not a crash: the file cannot be a module now, and loading it again will not change that.
            channel.send { $0.append(.activated, json: ["error": .string("\(error)"), "unloadable": .bool(true)]) }
            return
        }
        // The local bus: routing and demand here, everything else at the host.
        let bus = Bus(remote: self)
        for kind in json["kinds"]?.arrayValue ?? [] {
            guard let kind = kind.stringValue else { continue }
            bus.registerSource(kind: kind) { _, _ in preconditionFailure("a worker's bus never starts a source") }
        }
        // Unbounded here: the host bounds what it sends, and drops belong to its mailbox.
        let mailbox = Mailbox(label: name, capacity: Int.max, byteCapacity: Int.max)
        self.mailbox = mailbox
        let channel = channel
        let log = ModuleLog { level, message in
            channel.send { $0.append(.log, json: ["level": .string(level.rawValue), "message": .string(message)]) }
        }
        // The section against the module's declaration before any module code runs; the host
        // places the problems in its config file (it has the lines, the worker the declaration).
        let keys = library.configKeys
        let config = ModuleConfig(json: json["config"] ?? [:], keys: keys)
        let problems = keys.check(config.values)
        guard problems.isEmpty else {
            var reply = ConfigProblemsWire.encode(problems, keysSummary: keys.summary)
            reply["error"] = .string("config refused")
            channel.send { $0.append(.activated, json: .object(reply)) }
            return
        }
        if !keys.isDeclared && !config.values.isEmpty {
            log.warning("its config section is not checked: the module declares no configKeys, so a mistyped key is not noticed")
        }
        let context = ModuleContext(bus: bus.scoped(to: mailbox), config: config, log: log)
        if json["time_handlers"]?.boolValue == true {
            // Called by `handle(in:)` on the module's queue; sent with the next progress report.
            context.handlerDuration = { [self] nanoseconds in
                if timedHandlerCalls.count < Self.timedHandlerCallsLimit { timedHandlerCalls.append(nanoseconds) }
            }
        }
        self.context = context
        let module = ModuleBox(module: library.makeModule())
        self.module = module
        mailbox.perform { [self] in
            do {
                try module.module.activate(context)
                channel.send { $0.append(.activated, json: ["name": .string(module.module.name), "version": .string(module.module.version)]) }
                // Loading and activating touched code all over that the worker does not run again.
                DispatchQueue.global(qos: .utility).async { System.releaseCleanFilePages() }
            } catch {
                for cancellable in context.cancellables { cancellable.cancel() }
                context.cancellables.removeAll()
                channel.send { $0.append(.activated, json: ["error": .string("activate threw: \(error)")]) }
            }
        }
        startHeartbeat(every: .milliseconds(Int(json["heartbeat_ms"]?.intValue ?? 2_500)))
    }

    /// Hands a batch to the module; once it has handled it, reports progress.
    private func deliver(_ batch: [(subscription: UInt64, event: Event)]) {
        guard let mailbox, let context else { return }
        let count = UInt64(batch.count)
        let bytes = batch.reduce(0) { $0 + $1.event.estimatedBytes }
        context.bus.deliverRemote(batch)
        mailbox.perform { [self] in
            handled += count
            handledBytes += bytes
            reportProgress()
        }
    }

    // On the module's queue only.
    /// Items (events and gap notices) of the batches the module has handled, and their bytes.
    private var handled: UInt64 = 0
    private var handledBytes = 0
    /// What the last report said.
    private var reportedHandled: UInt64 = 0
    private var reportedBytes = 0
    private var lastProgress: UInt64 = 0
    private var progressScheduled = false
    /// Timed handler calls not yet sent to the host. Reports go at least every millisecond while
    /// events flow (and with each heartbeat), so this holds a millisecond's samples; past the
    /// limit a sample is not kept — the histogram is a sample of calls, no event is lost.
    private var timedHandlerCalls: [Int64] = []
    private static let timedHandlerCallsLimit = 4_096

    /// Tells the host how many events the module has handled — at most once a millisecond: in a
    /// stream of small batches a report per batch would cost the host's reader a wake-up each.
    /// A report held back is sent a millisecond later, so the host's count (which decides how
    /// many events a crash lost) is never more than that behind — or at once when half the
    /// mailbox's bounds were handled since the last one, so the host, which counts them as held
    /// until it hears, never drops for want of a report. On the module's queue.
    private func reportProgress() {
        let now = MonotonicClock.now()
        let pressing = (handled - reportedHandled) * 2 >= window || (handledBytes - reportedBytes) * 2 >= windowBytes
        guard pressing || now &- lastProgress >= 1_000_000 else {
            if !progressScheduled {
                progressScheduled = true
                mailbox?.queue.asyncAfter(deadline: .now() + .milliseconds(1)) { [self] in
                    progressScheduled = false
                    reportProgress()
                }
            }
            return
        }
        lastProgress = now
        reportedHandled = handled
        reportedBytes = handledBytes
        let total = handled
        let errors = UInt64(context?.errors ?? 0)
        // Written right here when no write is in progress: the host's reader never stops
        // reading, so this blocks the module's queue only as long as a send takes.
        let timed = timedHandlerCalls
        timedHandlerCalls.removeAll(keepingCapacity: true)
        channel.sendThrottled(inline: true) { frames in
            if !timed.isEmpty { frames.appendHandlerDurations(timed) }
            frames.appendProgress(consumed: total, errors: errors)
        }
    }

    private func startHeartbeat(every interval: Duration) {
        // A queue of the default QoS, as every other queue here: on Linux, Dispatch renices a
        // pool thread for a lower QoS and cannot renice it back without CAP_SYS_NICE, which a
        // sandboxed service lacks ("Failed to set thread priority for worker thread" at start).
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "eventbus.worker.heartbeat"))
        timer.schedule(deadline: .now() + DispatchTimeInterval(interval), repeating: DispatchTimeInterval(interval))
        timer.setEventHandler { [self] in
            guard let mailbox, context != nil else { return }
            guard !heartbeatQueued.exchange(true, ordering: .relaxed) else { return }
            mailbox.perform { [self] in
                heartbeatQueued.store(false, ordering: .relaxed)
                lastProgress = 0  // a heartbeat is never held back
                reportProgress()
            }
        }
        timer.resume()
        heartbeat = timer
    }

    // MARK: BusRemote: what module code does with its bus

    func subscribe(_ id: UInt64, patterns: [EventPattern], source: SourceRequest?) {
        var json: [String: JSON] = ["id": .int(Int64(id)), "patterns": .array(patterns.map { .string($0.description) })]
        if let source {
            guard let spec = SourceSpec.encode(source) else {
                context?.log.error("source \(source.id) cannot be opened from a worker process (only timer, files and journal sources are forwarded to the host); this subscription gets no events")
                return
            }
            json["source"] = spec
        }
        channel.send { $0.append(.subscribe, json: .object(json)) }
    }

    func cancel(_ id: UInt64) {
        channel.send { $0.append(.cancel, json: ["id": .int(Int64(id))]) }
    }

    func post(_ event: Event) {
        channel.send { $0.appendEvent(event, type: .posts, subscription: 0) }
    }

    func acknowledge(source: String, cursor: String, sequence: UInt64) throws {
        let id = acknowledgements.withLock {
            nextAcknowledgement += 1
            return nextAcknowledgement
        }
        let sent = channel.send {
            $0.append(.acknowledge, json: ["id": .int(id), "source": .string(source), "cursor": .string(cursor),
                                           "sequence": .int(Int64(clamping: sequence))])
        }
        guard sent else { throw EventBusError(.acknowledgementFailed, "the host connection is closed") }
        let answer: String?? = acknowledgements.withLock {
            while acknowledged[id] == nil && !channel.isClosed {
                _ = acknowledgements.wait(until: Date().addingTimeInterval(0.1))
            }
            return acknowledged.removeValue(forKey: id)
        }
        switch answer {
        case .some(.none): return
        case .some(.some(let message)): throw EventBusError(.acknowledgementFailed, message)
        case .none: throw EventBusError(.acknowledgementFailed, "the host connection closed before it answered")
        }
    }
}

/// Carries the module instance to its queue (module objects are not Sendable; the worker calls
/// one only on its mailbox queue).
struct ModuleBox: @unchecked Sendable {
    let module: any EventBusModule
}
