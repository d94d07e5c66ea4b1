import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import ModuleIsolation
import ModuleLoading
import Synchronization

/// The registry of handler modules: loads, activates, reconfigures and deactivates them, and
/// reports on them.
///
/// ## Threads
/// - Changes (``start(_:defaultMailbox:progress:)``, a reload's prepare, commit and abandon,
///   ``drainAndDeactivateAll(until:)``)
///   come from one thread at a time — ``BusHost``'s control queue. They block while module code
///   runs, never longer than the call time limit.
/// - Module code runs only on the module's mailbox queue: activation, reconfiguration and
///   deactivation are ``ModuleCall``s there, and its subscriptions deliver there.
/// - ``statistics`` may be read from any thread.
///
/// ## Isolation
/// A module that throws from `activate` is refused (logged, its subscriptions cancelled, state
/// `failed`); one that throws from a handler is counted (``ModuleContext/errors``) and keeps
/// running; one that stalls loses only its own events — its bounded mailbox drops and announces
/// them — and the host stops waiting for it after the call time limit. None of these stops the
/// host or the other modules. A module with `isolation: process` runs in a worker process
/// (``WorkerSupervisor``, see `ModuleHost+Isolation.swift`): a crash or a hang there ends only
/// the worker, which is restarted.
final class ModuleHost: Sendable {
    let bus: Bus
    private let loader: ModuleLoader
    let logger: Logger
    let callTimeout: Duration
    /// In config order.
    private let slots = Mutex<[ModuleSlot]>([])
    /// What an in-process module's handlers report their durations to, by module name
    /// (``ModuleContext/handlerDuration``); nil: not timed.
    let handlerTiming: (@Sendable (String) -> @Sendable (Int64) -> Void)?

    /// `callTimeout` bounds how long the host waits for one call into a module (activate,
    /// reconfigure, deactivate) before it gives up on it.
    init(bus: Bus, loader: ModuleLoader, logger: Logger, callTimeout: Duration,
         handlerTiming: (@Sendable (String) -> @Sendable (Int64) -> Void)? = nil) {
        self.bus = bus
        self.loader = loader
        self.logger = logger
        self.callTimeout = callTimeout
        self.handlerTiming = handlerTiming
    }

    var statistics: [ModuleStatistics] {
        slots.withLock { $0 }.map(\.statistics)
    }

    func slot(_ name: String) -> ModuleSlot? {
        slots.withLock { $0.first { $0.name == name } }
    }

    // MARK: Starting

    /// Starts the config's modules at host start: each enabled one is loaded and activated, each
    /// disabled one listed. A module that fails is logged, shows as `failed` in ``statistics``
    /// and is left out — one module's trouble must not keep the others from running (a reload,
    /// unlike this, applies as a whole: `ModuleReload.swift`). `progress` hears of each call
    /// into a module before it is made.
    func start(_ modules: [ModuleEntry], defaultMailbox: MailboxLimits, progress: (HostProgress) -> Void = { _ in }) {
        for entry in modules {
            let slot = makeSlot(entry, mailbox: entry.mailboxLimits(default: defaultMailbox))
            if entry.enabled { _ = activate(slot, entry: entry, progress: progress) }
        }
    }

    /// What runs now, per module name, as ``ModulePlan`` compares it with the config.
    var current: [String: ModulePlan.Current] {
        Dictionary(uniqueKeysWithValues: slots.withLock { $0 }.map { slot in
            (slot.name, ModulePlan.Current(entry: slot.entry, isActive: slot.isActive,
                                           mailbox: MailboxLimits(events: slot.mailbox.capacity, bytes: slot.mailbox.byteCapacity),
                                           fileChanged: slot.fileChangedSinceActivation))
        })
    }

    /// Every slot, in config order.
    var allSlots: [ModuleSlot] { slots.withLock { $0 } }

    /// Puts `slot` in the registry in place of the one of the same name (or at the end).
    func install(_ slot: ModuleSlot) {
        slots.withLock { slots in
            if let index = slots.firstIndex(where: { $0.name == slot.name }) { slots[index] = slot } else { slots.append(slot) }
        }
    }

    func remove(_ slot: ModuleSlot) {
        slots.withLock { $0.removeAll { $0 === slot } }
    }

    /// Orders the registry as `modules` lists them.
    func sort(as modules: [ModuleEntry]) {
        let order = Dictionary(uniqueKeysWithValues: modules.enumerated().map { ($1.name, $0) })
        slots.withLock { $0.sort { order[$0.name, default: .max] < order[$1.name, default: .max] } }
    }

    func makeSlot(_ entry: ModuleEntry, mailbox: MailboxLimits) -> ModuleSlot {
        let slot = ModuleSlot(entry: entry, mailbox: mailbox)
        slots.withLock { $0.append(slot) }
        return slot
    }

    func log(for name: String) -> Logger {
        var logger = logger
        logger[metadataKey: "module"] = "\(name)"
        return logger
    }

    // MARK: Module lifecycle

    private enum Activation: Sendable {
        case activated(ModuleSlot.Running)
        case threw(String)
    }

    /// Loads the module's library (once per process) and activates a new instance on its queue.
    /// Returns why it is not active, `file:line: key: problem` each (empty: active); each is
    /// logged too, and the slot's state says it.
    func activate(_ slot: ModuleSlot, entry: ModuleEntry, progress: (HostProgress) -> Void) -> [ConfigError] {
        let logger = log(for: slot.name)
        slot.status = .starting
        slot.entry = entry
        if entry.isolation == .process || slot.activatedFile == nil {
            // In eventbusd, the first load stays: a later activation reuses the loaded code.
            slot.activatedFile = try? System.status(of: entry.path)
        }
        if entry.isolation == .process {
            // Never loaded here: a broken file must not touch the host's address space.
            return activateInWorker(slot, entry: entry, progress: progress)
        }
        let library: LoadedLibrary
        do {
            library = try loader.load(entry.path)
        } catch {
            logger.error("\(entry.location): modules.\(slot.name): \(error)")
            slot.status = .failed(error.description)
            return [entry.problem(error.description)]
        }
        if library.changedOnDisk {
            logger.warning("\(entry.path) was replaced on disk after it was loaded; \(slot.name) runs the code loaded first until eventbusd restarts")
        }
        // The section against the module's own declaration, before any of its code runs.
        let keys = library.configKeys
        if let refusal = ModuleConfigRefusal.check(entry.config, keys: keys, at: entry.configLocations) {
            return refuseConfig(slot, refusal)
        }
        if let warning = entry.undeclaredWarning(keys: keys) { logger.warning("\(warning)") }
        let module = ModuleBox(module: library.makeModule())
        let context = ModuleContext(bus: bus.scoped(to: slot.mailbox), config: entry.config(declaredBy: keys),
                                    log: .bridged(to: self.logger, module: slot.name))
        context.handlerDuration = handlerTiming?(slot.name)
        progress(.callingModule(name: slot.name, call: .activate, timeLimit: callTimeout))
        let outcome = ModuleCall.run(on: slot.mailbox, timeout: callTimeout, {
            do {
                try module.module.activate(context)
                return Activation.activated(.init(instance: .inProcess(module, context),
                                                  reportedName: module.module.name, version: module.module.version))
            } catch {
                // Undo what it subscribed before throwing: a refused module receives nothing.
                context.cancelSubscriptions()
                return Activation.threw("\(error)")
            }
        }, ifAbandoned: { outcome in
            // It finished after the host gave up: it is not registered, so take it down again.
            if case .activated = outcome { module.module.deactivate() }
            context.cancelSubscriptions()
        })
        switch outcome {
        case .activated(let running)?:
            slot.didActivate(running, entry: entry)
            logger.info("module \(slot.name) active (\(running.reportedName) \(running.version), \(library.resolvedPath))")
            return []
        case .threw(let message)?:
            logger.error("module \(slot.name) refused: activate threw: \(message); its subscriptions were cancelled")
            slot.status = .failed("activate threw: \(message)")
            return [entry.problem("activate threw: \(message)")]
        case nil:
            logger.error("module \(slot.name) refused: activate did not return within \(callTimeout); it will be taken down if it ever returns")
            slot.status = .failed("activate did not return within \(callTimeout)")
            return [entry.problem("activate did not return within \(callTimeout)")]
        }
    }

    enum Reconfiguration: Sendable {
        case result(ReconfigureResult)
        case threw(String)
        /// The section does not fit the module's declaration: the module was not asked.
        case refused(ModuleConfigRefusal)
    }

    /// Refuses a module whose section does not fit its declaration: each problem logged as
    /// `file:line: key: problem`, then the keys it reads. Nothing of the module ran. Returns the
    /// problems.
    func refuseConfig(_ slot: ModuleSlot, _ refusal: ModuleConfigRefusal) -> [ConfigError] {
        let logger = log(for: slot.name)
        for problem in refusal.problems { logger.error("\(problem)") }
        logger.error("module \(slot.name) refused: its config section does not fit what it declares (\(refusal.validKeys))")
        slot.status = .failed(refusal.summary)
        return refusal.problems
    }

    /// Hands `entry`'s section to the running module — checked against its declaration first,
    /// in eventbusd; in its worker, the worker checks — and says what became of it. Nothing is
    /// logged or recorded here: a reload decides what the outcome means for the whole.
    func reconfigure(_ slot: ModuleSlot, with entry: ModuleEntry, progress: (HostProgress) -> Void) -> Reconfiguration? {
        guard let running = slot.running else { return .result(.reactivate) }
        progress(.callingModule(name: slot.name, call: .reconfigure, timeLimit: callTimeout))
        switch running.instance {
        case .worker(let supervisor):
            return reconfigureInWorker(supervisor, entry: entry)
        case .inProcess(let module, let context):
            let keys = type(of: module.module).configKeys
            if let refusal = ModuleConfigRefusal.check(entry.config, keys: keys, at: entry.configLocations) {
                return .refused(refusal)
            }
            return reconfigureInProcess(slot, module: module, context: context, config: entry.config(declaredBy: keys))
        }
    }

    private func reconfigureInProcess(_ slot: ModuleSlot, module: ModuleBox, context: ModuleContext,
                                      config: ModuleConfig) -> Reconfiguration? {
        ModuleCall.run(on: slot.mailbox, timeout: callTimeout, {
            do {
                let result = try module.module.reconfigure(config, context: context)
                // On the module's queue, like every other use of its context.
                if case .applied = result { context.config = config }
                return Reconfiguration.result(result)
            } catch {
                return Reconfiguration.threw("\(error)")
            }
        }, ifAbandoned: { _ in })
    }

    /// Calls the module's `deactivate`, cancels its subscriptions and drops the instance — on its
    /// queue, after what is already queued there. The library stays loaded (never `dlclose`).
    /// Returns false when the module overran `timeout` (the deactivation still runs if it ever
    /// gets its queue back) or its worker ended before it finished.
    @discardableResult
    func deactivate(_ slot: ModuleSlot, reason: String, becoming status: ModuleState,
                            timeout: Duration? = nil, progress: (HostProgress) -> Void = { _ in }) -> Bool {
        guard let running = slot.running else { return true }
        let logger = log(for: slot.name)
        progress(.callingModule(name: slot.name, call: .deactivate, timeLimit: timeout ?? callTimeout))
        let finished: Bool
        var ended: WorkerProcess.Exit?
        var lostInWorker: UInt64 = 0
        switch running.instance {
        case .worker(let supervisor):
            let outcome = supervisor.stop(timeout: timeout ?? callTimeout)
            finished = outcome == .deactivated
            switch outcome {
            case .deactivated: break
            case .ended(let exit, let lost):
                ended = exit
                lostInWorker = lost
            case .timedOut(let lost): lostInWorker = lost
            }
        case .inProcess(let module, let context):
            finished = ModuleCall.run(on: slot.mailbox, timeout: timeout ?? callTimeout, {
                module.module.deactivate()
                context.cancelSubscriptions()
                return true
            }, ifAbandoned: { _ in }) ?? false
        }
        slot.retire(as: status)
        // A worker that did not finish takes what it held with it: say how much, as the host's
        // own mailbox does for a module inside it.
        let lostText = lostInWorker == 0 ? "" : "; \(lostInWorker) event(s) the module had not handled are lost"
        if finished {
            logger.info("module \(slot.name) deactivated (\(reason))")
        } else if let ended {
            logger.warning("module \(slot.name)'s worker ended before it finished deactivating: \(ended) (\(reason))\(lostText)")
        } else if case .worker = running.instance {
            logger.warning("module \(slot.name) did not finish deactivating within \(timeout ?? callTimeout) (\(reason)); its worker was killed\(lostText)")
        } else {
            logger.warning("module \(slot.name) did not finish deactivating within \(timeout ?? callTimeout) (\(reason)); its subscriptions are cancelled when it returns")
        }
        return finished
    }

    // MARK: Shutdown

    /// What ``drainAndDeactivateAll(until:)`` could not finish.
    struct ShutdownOutcome {
        /// Modules whose queued events are lost (each logged with its count).
        var undrained: [String] = []
        /// Modules whose `deactivate` had not returned at the deadline.
        var notDeactivated: [String] = []
    }

    /// Lets every module deliver what its mailbox holds, then deactivates it — every module at
    /// once, each on its own thread, all within the one `deadline` — so a stalled module (even
    /// the first in the config) does not use up the others' time: an idle module drains and
    /// deactivates at once. A module that is still inside a handler at the deadline with nothing
    /// queued behind it has lost nothing and is not reported undrained.
    func drainAndDeactivateAll(until deadline: ContinuousClock.Instant) -> ShutdownOutcome {
        let running = slots.withLock { $0 }.filter { $0.running != nil }
        let outcome = Mutex(ShutdownOutcome())
        let group = DispatchGroup()
        for slot in running {
            group.enter()
            // A thread, not a Dispatch worker: each blocks until its module is done or the
            // deadline, and a stuck one must not hold up the pool the others need.
            Thread.detachNewThread { [self] in
                defer { group.leave() }
                // A crashed worker's mailbox is held for its restart: no worker to drain it to,
                // and its stop counts what it holds as lost.
                let inWorker = if case .worker = slot.running?.instance { true } else { false }
                let waitingForRestart = if case .worker(let supervisor)? = slot.running?.instance { supervisor.snapshot.pid == nil } else { false }
                if !waitingForRestart, !slot.mailbox.drain(timeout: max(.zero, deadline - .now)) {
                    let queued = slot.mailbox.statistics.queued
                    if queued > 0 { outcome.withLock { $0.undrained.append(slot.name) } }
                    // A module in a worker: its stop below logs what it held — this mailbox, what
                    // is on its way to the worker, the worker's queue — as lost, in one number.
                    if !inWorker, queued > 0 {
                        log(for: slot.name).warning("module \(slot.name) did not drain its mailbox within the shutdown budget: \(queued) queued event(s) are lost")
                    } else if !inWorker {
                        log(for: slot.name).notice("module \(slot.name) is still handling its last event at the shutdown deadline; nothing queued behind it is lost")
                    }
                }
                if !deactivate(slot, reason: "shutting down", becoming: .stopped, timeout: max(.zero, deadline - .now)) {
                    outcome.withLock { $0.notDeactivated.append(slot.name) }
                }
            }
        }
        group.wait()  // each thread returns by the deadline
        let names = running.map(\.name)
        var result = outcome.withLock { $0 }
        result.undrained = names.filter(result.undrained.contains)  // config order
        result.notDeactivated = names.filter(result.notDeactivated.contains)
        return result
    }
}
