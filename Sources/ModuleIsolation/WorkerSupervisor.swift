import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import Synchronization

/// Runs one process-isolated module: spawns its worker, activates, reconfigures and stops it,
/// watches its heartbeat, and when the worker dies — a signal, an exit, or no heartbeat within
/// ``WorkerSettings/heartbeatTimeout`` (then it is killed with SIGKILL) — posts
/// `module.crashed` and restarts it as ``RestartPolicy`` says, or marks it failed once the start
/// limit is reached. Between a crash and the restart the module's subscriptions and mailbox are
/// held for it (``ModuleForwarding``), so what is posted meanwhile reaches the restarted worker
/// or is counted and announced.
///
/// ## Threads
/// Every lifecycle step runs on the supervisor's own serial queue: the calls the host makes
/// (``start(_:)``, ``reconfigure(_:)``, ``stop(timeout:)``, which block the caller — the host's
/// control queue — until done or timed out), crash handling (told by the session's reader
/// thread), scheduled restarts and the heartbeat watchdog. So a restart never races a reload or
/// a shutdown. ``snapshot`` is readable from any thread.
///
/// An exec module (``Configuration/exec``) is supervised the same way — crash, restart, start
/// limit, held mailbox, process group — with its program in the worker's place
/// (`WorkerSupervisor+Exec.swift`); it sends no heartbeat, so it has no watchdog.
public final class WorkerSupervisor: @unchecked Sendable {
    // @unchecked: `configuration`, `session`, `policy`, `stopping`, `generation`, `watchdog`,
    // `lastHandover`, `execSubscriptions` are touched only on `queue`; `state` has its own lock.

    public struct Configuration: Sendable {
        public var name: String
        public var path: String
        public var config: ModuleConfig
        public var settings: WorkerSettings
        /// How long one call into the module (activate, reconfigure, deactivate) may take.
        public var callTimeout: Duration
        public var executable: String
        /// Records the module's timed handler calls, as `ModuleContext.handlerDuration` does in
        /// eventbusd; nil: the worker does not time them.
        public var handlerDuration: (@Sendable (Int64) -> Void)?
        /// Set for an exec module: the program run instead of a worker loading `path`, and how
        /// its lines are made.
        public var exec: ExecSettings?
        public var lineFormat: ExecLineFormat?

        public init(name: String, path: String, config: ModuleConfig, settings: WorkerSettings,
                    callTimeout: Duration, executable: String = WorkerProcess.defaultExecutable,
                    handlerDuration: (@Sendable (Int64) -> Void)? = nil,
                    exec: ExecSettings? = nil, lineFormat: ExecLineFormat? = nil) {
            self.name = name
            self.path = path
            self.config = config
            self.settings = settings
            self.callTimeout = callTimeout
            self.executable = executable
            self.handlerDuration = handlerDuration
            self.exec = exec
            self.lineFormat = lineFormat
        }
    }

    public enum StartOutcome: Sendable, Equatable {
        case activated(reportedName: String, version: String)
        case failed(String)
        /// The worker could not load the module's file as a module (not an ELF object, no entry
        /// symbol, another SDK): the reason, once. Unlike a crash, trying again cannot help
        /// until the file changes, so a restart that meets it gives up at once.
        case unloadable(String)
        /// The section does not fit the module's declaration (``EventBusModule/configKeys``):
        /// the problems, placed by path inside the section, and the keys it reads. The worker
        /// was ended before any module code ran.
        case configRefused([ModuleConfigProblem], keysSummary: String)
    }

    public enum ReconfigureOutcome: Sendable, Equatable {
        case applied
        case reactivate
        case threw(String)
        /// The new section does not fit the declaration; the module was not asked.
        case configRefused([ModuleConfigProblem], keysSummary: String)
        /// No answer within the call time limit (or the worker is not running).
        case noAnswer
    }

    /// What status displays show of the worker.
    public struct Snapshot: Sendable, Equatable {
        public var pid: Int32?
        public var restarts = 0
        /// The last crash, as logged (`killed by signal 4 (SIGILL)`, `no heartbeat within 2s`…).
        public var lastCrash: String?
        public var lastCrashTime: Date?
        /// Set while a restart is pending.
        public var restarting = false
        /// Set when the start limit was reached: the module stays down until a reload.
        public var gaveUp: String?
        public var reportedName: String?
        public var version: String?
        /// Handler errors the worker reported, over every worker of this module; for an exec
        /// module, its protocol errors.
        public var errors = 0
        /// An exec module whose program has not read its input for a while (``stallAfter``): what
        /// comes for it waits in its mailbox, and past its bound is dropped.
        public var stalled = false
    }

    /// How long an exec module's input stays full before it counts as stalled.
    public static let stallAfter = Duration.seconds(1)

    let bus: Bus
    let mailbox: Mailbox
    let log: ModuleLog
    let queue: DispatchQueue
    var configuration: Configuration
    private var policy: RestartPolicy
    var session: WorkerSession?
    private var stopping = true
    /// Bumped by every start and stop, so a restart scheduled before them does nothing.
    private var generation = 0
    private var watchdog: DispatchSourceTimer?
    let state = Locked(Snapshot())
    private var retiredErrors = 0
    /// The module's subscriptions on the host, kept across a crash and handed to the next worker.
    let forwarding: ModuleForwarding
    /// What the last worker to start took over (see ``ModuleForwarding/attach(_:worker:retiring:)``).
    var lastHandover: ModuleForwarding.Handover?
    /// An exec module's subscription ids and field matches, kept across its program's restarts
    /// (its held subscriptions' events keep their ids until the new program makes them again).
    var execSubscriptions = ExecSubscriptions()

    /// - Parameters:
    ///   - bus: the host's bus: subscriptions are made on it (scoped to `mailbox`), posts and
    ///     `module.crashed` posted to it.
    ///   - mailbox: the module's mailbox on the host: its bound and gap notices apply to what is
    ///     forwarded to the worker, and its counts are the module's delivered/dropped/queued.
    ///   - log: the host's log for this module (tagged with its name): the worker's log lines
    ///     and the supervisor's own reports go there.
    public init(configuration: Configuration, bus: Bus, mailbox: Mailbox, log: ModuleLog) {
        self.configuration = configuration
        self.bus = bus
        self.mailbox = mailbox
        self.log = log
        self.policy = RestartPolicy(settings: configuration.settings)
        self.queue = DispatchQueue(label: "eventbus.supervisor.\(configuration.name)")
        self.forwarding = ModuleForwarding(mailbox: mailbox, hostBus: bus, log: log)
    }

    public var snapshot: Snapshot {
        var snapshot = state.withLock { $0 }
        if let session = state.withLock({ _ in currentSessionForSnapshot }) {
            snapshot.errors += Int(session.errors.load(ordering: .relaxed))
            snapshot.stalled = session.exec != nil && session.channel.heldFor >= Self.stallAfter
        }
        return snapshot
    }

    /// Read by ``snapshot`` under `state`'s lock; written on `queue` under it.
    private var currentSessionForSnapshot: WorkerSession?

    func setSession(_ new: WorkerSession?) {
        session = new
        state.withLock { state in
            currentSessionForSnapshot = new
            state.pid = new?.process.pid
        }
    }

    // MARK: Calls from the host

    /// Starts a worker and activates the module in it with `configuration`. A start resets the
    /// start limit (as `systemctl restart` does).
    public func start(_ configuration: Configuration) -> StartOutcome {
        queue.sync {
            self.configuration = configuration
            policy = RestartPolicy(settings: configuration.settings)
            stopping = false
            generation += 1
            execSubscriptions = ExecSubscriptions()
            state.withLock {
                $0.gaveUp = nil
                $0.restarting = false
            }
            let outcome = startWorker()
            if case .activated = outcome {} else { forwarding.discardAll() }
            return outcome
        }
    }

    public func reconfigure(_ config: ModuleConfig) -> ReconfigureOutcome {
        queue.sync {
            // A program reads its config once, in its hello: a new one means a new program.
            if configuration.exec != nil { return .reactivate }
            guard let session else {
                // Between a crash and its restart: the restart takes the new section.
                configuration.config = config
                return .applied
            }
            guard let reply = session.call(.reconfigure, ["config": config.json], expecting: .reconfigured,
                                           timeout: configuration.callTimeout) else { return .noAnswer }
            if let refused = ConfigProblemsWire.decode(reply) { return .configRefused(refused.problems, keysSummary: refused.keysSummary) }
            switch reply["result"]?.stringValue {
            case "applied":
                configuration.config = config
                return .applied
            case "reactivate": return .reactivate
            default: return .threw(reply["message"]?.stringValue ?? "reconfigure failed")
            }
        }
    }

    /// How ``stop(timeout:)`` went.
    public enum StopOutcome: Sendable, Equatable {
        case deactivated
        /// No answer within the timeout: the worker was killed, with the events it held and the
        /// host still queued for it (`lost`).
        case timedOut(lost: UInt64)
        /// The worker ended by itself before it answered (a module that crashed in `deactivate`),
        /// losing `lost` events as above.
        case ended(WorkerProcess.Exit, lost: UInt64)
    }

    /// Lets the worker handle what was forwarded, deactivates the module, ends the worker. No
    /// restart follows.
    @discardableResult
    public func stop(timeout: Duration) -> StopOutcome {
        queue.sync {
            stopping = true
            generation += 1
            stopWatchdog()
            state.withLock { $0.restarting = false }
            guard let session else {
                // Between a crash and its restart: what was held for the module is lost.
                let lost = forwarding.discardAll()
                if lost > 0 { log.notice("module stopped while waiting for its restart: \(lost) event(s) held for it are lost") }
                return .deactivated
            }
            let deadline = ContinuousClock.now + timeout
            if session.exec != nil { return stopExec(session, deadline: deadline) }
            // What waits in the host mailbox goes out before the deactivate frame: a drain whose
            // marker also sends the batch it ends (a drain's marker runs before the batch's flush).
            let drained = DispatchSemaphore(value: 0)
            mailbox.perform { [forwarding] in
                forwarding.flushNow()
                drained.signal()
            }
            var answered = false
            // A worker that has just ended (its crash not yet handled) cannot be drained to: its
            // mailbox is held for a restart that a stop cancels.
            if !session.readerEnded, drained.wait(timeout: .now() + DispatchTimeInterval(max(.zero, deadline - .now))) == .success {
                answered = session.call(.deactivate, [:], expecting: .deactivated, timeout: max(.zero, deadline - .now)) != nil
            }
            // No answer, and the worker's end of the socket has ended: it is gone or going.
            let ended = !answered && session.readerEnded
            end(session)
            // Ended (killed if need be) before what it held is counted: what it reported
            // handled is then all it will ever report.
            let exit = session.process.reap(within: answered || ended ? .seconds(2) : .zero)
            let lost = loseWhatItHeld(session)
            session.channel.closeDescriptor()
            if answered { return .deactivated }
            return ended ? .ended(exit, lost: lost) : .timedOut(lost: lost)
        }
    }

    /// The module stops with `session` (ended, its process gone or going): everything held for
    /// it is let go, and counted once — the host's mailbox, what was kept while no worker ran,
    /// what the worker was sent and had not reported handled. Waits (briefly) for the session's
    /// reader to read the worker's last reports first.
    func loseWhatItHeld(_ session: WorkerSession) -> UInt64 {
        session.replies.waitForEnd(timeout: .seconds(1))
        let inFlight = forwarding.detach()
        return inFlight + forwarding.discardAll()
    }

    // MARK: On the queue

    private func startWorker() -> StartOutcome {
        if let exec = configuration.exec, let format = configuration.lineFormat { return startExec(exec, format: format) }
        let process: WorkerProcess
        do {
            process = try WorkerProcess.spawn(executable: configuration.executable, name: configuration.name,
                                              settings: configuration.settings)
        } catch {
            return .failed(error.description)
        }
        let worker = forwarding.beginWorker()
        let session = WorkerSession(process: process, name: configuration.name, hostBus: bus, forwarding: forwarding,
                                    worker: worker, log: log, handlerDuration: configuration.handlerDuration) { [weak self] session, reason in
            guard let self else { return }
            self.queue.async { self.sessionEnded(session, reason: reason) }
        }
        session.start()
        // A module's forked child can keep the worker's socket open after the worker died: its
        // end is then seen from the process, and the session ended as if the socket had closed.
        process.watchExit { [channel = session.channel] in channel.close() }
        let heartbeat = configuration.settings.heartbeatTimeout
        let start: JSON = [
            "module": .string(configuration.name),
            "path": .string(configuration.path),
            "config": configuration.config.json,
            "kinds": .array(bus.sourceKinds.map(JSON.string)),
            "heartbeat_ms": .int(max(10, heartbeat.clampedNanoseconds / 4_000_000)),
            "window": .int(Int64(mailbox.capacity)),
            "window_bytes": .int(Int64(mailbox.byteCapacity)),
            "time_handlers": .bool(configuration.handlerDuration != nil),
        ]
        guard let reply = session.call(.start, start, expecting: .activated, timeout: configuration.callTimeout) else {
            // Ended: it died loading or activating the module (a crash in an ELF constructor or
            // in `activate`), and its exit says how.
            let ended = session.readerEnded
            end(session)
            let exit = session.process.reap(within: ended ? .seconds(2) : .zero)
            session.channel.closeDescriptor()
            return .failed(ended ? "the worker ended while loading or activating the module: \(exit)"
                                 : "activate did not return within \(configuration.callTimeout); the worker was killed")
        }
        if let error = reply["error"]?.stringValue {
            end(session)
            _ = session.process.reap(within: .seconds(2))
            session.channel.closeDescriptor()
            if let refused = ConfigProblemsWire.decode(reply) { return .configRefused(refused.problems, keysSummary: refused.keysSummary) }
            if reply["unloadable"]?.boolValue == true { return .unloadable(error) }
            return .failed(error)
        }
        let name = reply["name"]?.stringValue ?? configuration.name
        let version = reply["version"]?.stringValue ?? "?"
        session.lastHeard.store(MonotonicClock.now(), ordering: .relaxed)
        setSession(session)
        lastHandover = forwarding.attach(session, worker: worker)
        state.withLock {
            $0.reportedName = name
            $0.version = version
            $0.restarting = false
        }
        startWatchdog()
        return .activated(reportedName: name, version: version)
    }

    /// Takes the session down on the host side: its socket. The module's subscriptions stay
    /// (``ModuleForwarding``) until the next worker takes them over or they are discarded.
    func end(_ session: WorkerSession) {
        session.channel.close()
        if self.session === session {
            retiredErrors += Int(session.errors.load(ordering: .relaxed))
            state.withLock { $0.errors = retiredErrors }
            setSession(nil)
        }
    }

    /// The session's reader saw the socket end. Unless the host is stopping or replacing it on
    /// purpose, the worker crashed.
    func sessionEnded(_ session: WorkerSession, reason: String) {
        guard session === self.session, !stopping else { return }
        stopWatchdog()
        end(session)
        // The module's mailbox holds what comes for it until the restart. Sent but not reported
        // handled is lost: the event it died on is among them (see ModuleForwarding).
        let lost = forwarding.detach()
        let (exit, cpuSeconds) = session.process.reapMeasured(within: .seconds(2))
        session.channel.closeDescriptor()
        let hung = session.killedAsHung.load(ordering: .relaxed)
        // A reader that stopped before the end of input found the worker breaking the protocol
        // (a module can write anything to the socket): say that, not only how the worker ended.
        let cause = hung ? "no heartbeat within \(configuration.settings.heartbeatTimeout) (killed with SIGKILL)"
            : reason == FrameChannel.endOfInput ? describe(exit, cpuSeconds: cpuSeconds)
            : session.exec != nil ? "\(reason), so the host ended it; the program \(exit)"
            : "it broke the worker protocol (\(reason)), so the host ended its session; the worker \(exit)"
        crashed(cause: cause, exit: exit, lost: lost)
    }

    /// How the worker ended, with the limit that ended it where one did: the kernel enforces
    /// `cpu_limit` with SIGXCPU, and with SIGKILL 5 CPU seconds later if the module ignores it
    /// (told apart from another SIGKILL by the CPU time the worker had used).
    private func describe(_ exit: WorkerProcess.Exit, cpuSeconds: Double?) -> String {
        guard let limit = configuration.settings.cpuLimitSeconds else { return "\(exit)" }
        switch exit {
        case .signaled(SIGXCPU):
            return "it used up its CPU limit (cpu_limit \(limit)s): \(exit)"
        case .signaled(SIGKILL) where (cpuSeconds ?? 0) >= Double(limit):
            return "it used up its CPU limit (cpu_limit \(limit)s) and ignored SIGXCPU: \(exit)"
        default:
            return "\(exit)"
        }
    }

    /// What runs the module, in log lines: its worker, or an exec module's program.
    private var kind: String { configuration.exec == nil ? "worker" : "program" }

    /// A worker died (or failed to start again): announce it, then restart or give up.
    private func crashed(cause: String, exit: WorkerProcess.Exit?, lost: UInt64) {
        let decision = policy.afterCrash(at: .now)
        let restarts = state.withLock { state -> Int in
            state.lastCrash = cause
            state.lastCrashTime = Date()
            if case .restart = decision {
                state.restarts += 1
                state.restarting = true
            }
            return state.restarts
        }
        var fields: [String: FieldValue] = [
            "module": .string(configuration.name),
            "reason": .string(cause),
            "lost": .int(Int64(clamping: lost)),
            "restarts": .int(Int64(restarts)),
        ]
        switch exit {
        case .signaled(let signal)?: fields["signal"] = .int(Int64(signal))
        case .exited(let status)?: fields["exit_status"] = .int(Int64(status))
        case nil: break
        }
        switch decision {
        case .restart(let delay):
            fields["restarting"] = true
            log.error("module \(kind) crashed: \(cause); \(lost) event(s) in flight lost; restart \(restarts) in \(delay)")
            bus.post(Event(name: "module.crashed", source: "eventbusd", fields: fields))
            let generation = self.generation
            queue.asyncAfter(deadline: .now() + DispatchTimeInterval(delay)) { [weak self] in
                guard let self, self.generation == generation, !self.stopping else { return }
                switch self.startWorker() {
                case .activated(let name, let version):
                    let handover = self.lastHandover
                    let held = handover.map { $0.carried + $0.queued } ?? 0
                    let retired = handover?.retired ?? 0
                    let unless = retired == 0 ? "" : " (less those of the \(retired) subscription(s) it did not make again)"
                    self.log.notice("module restarted (\(name) \(version), \(self.kind) pid \(self.session?.process.pid ?? 0)); \(held) event(s) held for it meanwhile follow\(unless)")
                case .failed(let reason):
                    self.crashed(cause: "restart failed: \(reason)", exit: nil, lost: 0)
                case .unloadable(let reason):
                    self.giveUp("its file can no longer be loaded: \(reason)")
                case .configRefused(let problems, _):
                    self.crashed(cause: "restart failed: config refused: \(problems.map(\.description).joined(separator: "; "))", exit: nil, lost: 0)
                }
            }
        case .giveUp(let count, let interval):
            fields["restarting"] = false
            let reason = "start limit reached: \(count) restart(s) within \(interval), last crash: \(cause)"
            state.withLock {
                $0.gaveUp = reason
                $0.restarting = false
            }
            let held = forwarding.discardAll()
            log.error("module \(kind) crashed: \(cause); \(lost) event(s) in flight lost; \(reason); the module stays down until a reload, and the \(held) event(s) held for it are lost")
            bus.post(Event(name: "module.crashed", source: "eventbusd", fields: fields))
            bus.post(Event(name: "module.failed", source: "eventbusd",
                           fields: ["module": .string(configuration.name), "reason": .string(reason), "lost": .int(Int64(clamping: held))]))
        }
    }

    /// Stops restarting without counting a crash: the module stays down until a reload, as after
    /// its start limit. Said once, in the log and as `module.failed`.
    private func giveUp(_ reason: String) {
        state.withLock {
            $0.gaveUp = reason
            $0.restarting = false
        }
        let held = forwarding.discardAll()
        log.error("module not restarted: \(reason); the module stays down until a reload, and the \(held) event(s) held for it are lost")
        bus.post(Event(name: "module.failed", source: "eventbusd",
                       fields: ["module": .string(configuration.name), "reason": .string(reason), "lost": .int(Int64(clamping: held))]))
    }

    private func startWatchdog() {
        stopWatchdog()
        let timeout = configuration.settings.heartbeatTimeout
        let timer = DispatchSource.makeTimerSource(queue: queue)
        let period = max(Duration.milliseconds(20), timeout / 4)
        timer.schedule(deadline: .now() + DispatchTimeInterval(period), repeating: DispatchTimeInterval(period))
        timer.setEventHandler { [weak self] in
            guard let self, let session = self.session else { return }
            let silent = MonotonicClock.now() &- session.lastHeard.load(ordering: .relaxed)
            if silent > UInt64(timeout.clampedNanoseconds), !session.killedAsHung.exchange(true, ordering: .relaxed) {
                self.log.error("module worker \(session.process.pid) sent no heartbeat within \(timeout): its module is hung; killing it")
                session.process.kill(SIGKILL)
                // Ends the reader now, whoever else might still hold the worker's end open.
                session.channel.close()
            }
        }
        timer.resume()
        watchdog = timer
    }

    private func stopWatchdog() {
        watchdog?.cancel()
        watchdog = nil
    }
}
