import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import Synchronization
import SystemCalls

/// The host's side of one running worker process: the subscriptions it makes on the module's
/// behalf, the events it forwards, what the worker sends back.
///
/// Two kinds: an `eventbus-module-worker` speaking the binary frame protocol, or an exec
/// module's program speaking JSON lines (``exec``, `WorkerSession+Exec.swift`). Both are fed the
/// same way — the same subscriptions, mailbox and channel — and only the ends differ: an exec
/// session's channel turns frames into lines (``ExecLines``), and its reader reads lines.
///
/// ## Threads
/// - The **reader thread** (one per session) reads the socket: it makes and cancels the
///   module's subscriptions (through ``ModuleForwarding``, which outlives the session), posts
///   the module's events, writes its log lines, persists its journal acknowledgements, records
///   progress (the heartbeat) and hands call replies to the waiting ``WorkerSupervisor``.
/// - The **module's mailbox queue** on the host sends the events of the module's subscriptions
///   to this session's channel (``ModuleForwarding``); the channel's **writer thread** writes
///   them, and resumes the mailbox when it held it.
/// - What the module reports handled — a worker's progress, on the reader thread; for an exec
///   module, the events its channel takes for the program, where it writes — is settled with
///   the forwarding, which stops counting those against the mailbox's bounds.
final class WorkerSession: @unchecked Sendable {
    let process: WorkerProcess
    let channel: FrameChannel
    let name: String
    /// Unscoped: the module's posts are posted here.
    let hostBus: Bus
    let log: ModuleLog
    /// The module's subscriptions, made under ``worker``'s number.
    let forwarding: ModuleForwarding
    let worker: Int
    let replies = ReplySlot()
    let onEnd: @Sendable (WorkerSession, String) -> Void
    /// Where the module's timed handler calls are recorded (the host's histogram); nil: not timed.
    private let handlerDuration: (@Sendable (Int64) -> Void)?

    /// Errors its handlers threw, as the worker last reported (with what its module handled,
    /// which goes to ``ModuleForwarding/settle(worker:handled:)``).
    let errors = Atomic<UInt64>(0)
    /// `CLOCK_MONOTONIC` of the last progress report: the heartbeat.
    let lastHeard = Atomic<UInt64>(MonotonicClock.now())
    /// Set when the watchdog killed it for missing heartbeats.
    let killedAsHung = Atomic<Bool>(false)
    /// An exec module's program and its line protocol; nil for a worker.
    let exec: ExecLink?

    init(process: WorkerProcess, name: String, hostBus: Bus, forwarding: ModuleForwarding, worker: Int, log: ModuleLog,
         handlerDuration: (@Sendable (Int64) -> Void)?, onEnd: @escaping @Sendable (WorkerSession, String) -> Void) {
        self.process = process
        self.name = name
        self.hostBus = hostBus
        self.forwarding = forwarding
        self.worker = worker
        self.log = log
        self.onEnd = onEnd
        self.handlerDuration = handlerDuration
        self.channel = FrameChannel(fd: process.socket, name: "worker.\(name)")
        self.exec = nil
    }

    /// An exec module's session: `program` was spawned, its lines made as `format` says.
    init(program: ExecProcess, settings: ExecSettings, format: ExecLineFormat, subscriptions: ExecSubscriptions,
         name: String, hostBus: Bus, forwarding: ModuleForwarding, worker: Int, log: ModuleLog,
         onEnd: @escaping @Sendable (WorkerSession, String) -> Void) {
        let link = ExecLink(program: program, settings: settings, format: format, subscriptions: subscriptions)
        self.process = program.process
        self.name = name
        self.hostBus = hostBus
        self.forwarding = forwarding
        self.worker = worker
        self.log = log
        self.onEnd = onEnd
        self.handlerDuration = nil
        // A smaller high water than a worker's: what waits here is JSON for a program that may
        // be slow, and the mailbox, not this buffer, is what bounds it and counts the loss.
        // What the channel takes for the program has left the host: the module has it.
        self.channel = FrameChannel(fd: program.process.socket, name: "exec.\(name)", highWater: 256 << 10,
                                    translate: { [lines = link.lines] bytes in
                                        lines.translate(&bytes)
                                        forwarding.settle(worker: worker, handled: lines.taken.load(ordering: .relaxed))
                                    })
        self.exec = link
    }

    func start() {
        if let exec {
            startExec(exec)
            return
        }
        channel.start()
        let thread = Thread { [self] in
            System.nameCurrentThread("r<" + name)  // Linux keeps 15 bytes of a thread's name
            let reason = channel.readFrames { type, payload in try handle(type, payload) }
            replies.end()
            onEnd(self, reason)
        }
        thread.start()
    }

    /// The worker's end of the socket has ended (end of file or an error): the worker is gone or
    /// going. Not ``FrameChannel/isClosed``, which is this side closing (or failing to write), so
    /// it tells a ``call(_:_:expecting:timeout:)`` that got nil because the worker died from one
    /// that timed out.
    var readerEnded: Bool { replies.hasEnded }

    /// Sends a request and waits for its reply frame; nil when the worker ended or `timeout` passed.
    func call(_ type: FrameType, _ json: JSON, expecting reply: FrameType, timeout: Duration) -> JSON? {
        replies.expect(reply)
        guard channel.send({ $0.append(type, json: json) }) else { return nil }
        return replies.wait(timeout: timeout)
    }

    // MARK: The reader thread

    private func handle(_ type: FrameType, _ payload: UnsafeRawBufferPointer) throws {
        switch type {
        case .progress:
            var decoder = WireDecoder(payload)
            let handled = try decoder.integer(UInt64.self)
            errors.store(try decoder.integer(UInt64.self), ordering: .relaxed)
            lastHeard.store(MonotonicClock.now(), ordering: .relaxed)
            forwarding.settle(worker: worker, handled: handled)
        case .handlerDurations:
            var decoder = WireDecoder(payload)
            let count = Int(try decoder.integer(UInt32.self))
            for _ in 0..<count {
                let nanoseconds = try decoder.integer(Int64.self)
                handlerDuration?(nanoseconds)
            }
        case .posts:
            var decoder = WireDecoder(payload)
            let count = Int(try decoder.integer(UInt32.self))
            for _ in 0..<count { hostBus.post(try decoder.event()) }
        case .subscribe:
            let json = try JSON.frame(payload)
            guard let id = json["id"]?.intValue else { throw WireError("subscribe without id") }
            do {
                try forwarding.subscribe(worker: worker, id: UInt64(id), spec: json)
            } catch {
                log.error("the host could not subscribe for the module (\(json)): \(error)")
            }
        case .cancel:
            let json = try JSON.frame(payload)
            guard let id = json["id"]?.intValue else { throw WireError("cancel without id") }
            forwarding.cancel(worker: worker, id: UInt64(id))
        case .log:
            let json = try JSON.frame(payload)
            let level = json["level"]?.stringValue.flatMap(ModuleLog.Level.init(rawValue:)) ?? .info
            log.log(level, json["message"]?.stringValue ?? "")
        case .acknowledge:
            let json = try JSON.frame(payload)
            var answer: [String: JSON] = ["id": json["id"] ?? .null]
            do {
                try hostBus.acknowledgeJournal(source: json["source"]?.stringValue ?? "",
                                               cursor: json["cursor"]?.stringValue ?? "",
                                               sequence: UInt64(json["sequence"]?.intValue ?? 0))
            } catch {
                answer["error"] = .string((error as? EventBusError)?.message ?? "\(error)")
            }
            channel.send { $0.append(.acknowledged, json: .object(answer)) }
        case .activated, .reconfigured, .deactivated:
            replies.deliver(type, try JSON.frame(payload))
        default:
            throw WireError("the worker sent a host frame (\(type))")
        }
    }
}

/// Where a call's reply meets the waiting supervisor. One call at a time (the supervisor's queue
/// is serial); a reply that comes after its waiter gave up is dropped, not kept for the next.
final class ReplySlot: @unchecked Sendable {
    private let condition = NSCondition()
    private var expected: FrameType?
    private var value: JSON?
    private var ended = false

    func expect(_ type: FrameType) {
        condition.withLock {
            expected = type
            value = nil
        }
    }

    func deliver(_ type: FrameType, _ json: JSON) {
        condition.withLock {
            guard type == expected else { return }
            value = json
            condition.broadcast()
        }
    }

    var hasEnded: Bool { condition.withLock { ended } }

    /// Waits until the reader has ended, at most `timeout`.
    func waitForEnd(timeout: Duration) {
        let deadline = Date().addingTimeInterval(timeout.secondsValue)
        condition.withLock {
            while !ended { if !condition.wait(until: deadline) { break } }
        }
    }

    func end() {
        condition.withLock {
            ended = true
            condition.broadcast()
        }
    }

    func wait(timeout: Duration) -> JSON? {
        let deadline = Date().addingTimeInterval(timeout.secondsValue)
        return condition.withLock {
            while value == nil && !ended {
                if !condition.wait(until: deadline) { break }
            }
            defer {
                expected = nil
                value = nil
            }
            return value
        }
    }
}
