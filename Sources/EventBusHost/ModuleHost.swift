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
/// - Changes (``apply(_:defaultCapacity:progress:)``, ``drainAll(until:)``, ``deactivateAll(until:)``)
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

    private func slot(_ name: String) -> ModuleSlot? {
        slots.withLock { $0.first { $0.name == name } }
    }

    // MARK: Reconciling with the config

    /// Brings the modules in line with `modules`, the config's list: starts new ones, stops
    /// removed or disabled ones, reconfigures changed ones, retries refused ones. Every outcome
    /// is logged and shows in ``statistics``; none is thrown, because one module's trouble must
    /// not stop the others. `progress` hears of each call into a module before it is made.
    func apply(_ modules: [ModuleEntry], defaultMailbox: MailboxLimits,
               progress: (HostProgress) -> Void = { _ in }) {
        let current = Dictionary(uniqueKeysWithValues: slots.withLock { $0 }.map { slot in
            (slot.name, ModulePlan.Current(entry: slot.entry, isActive: slot.isActive,
                                           mailbox: MailboxLimits(events: slot.mailbox.capacity, bytes: slot.mailbox.byteCapacity),
                                           fileChanged: slot.fileChangedSinceActivation))
        })
        let desired = Dictionary(uniqueKeysWithValues: modules.map { ($0.name, $0) })
        for action in ModulePlan.actions(current: current, desired: modules, defaultMailbox: defaultMailbox) {
            switch action {
            case .stop(let name, let removed):
                guard let slot = slot(name) else { continue }
                deactivate(slot, reason: removed ? "removed from the config" : "disabled in the config", becoming: .disabled,
                           progress: progress)
                if removed {
                    slots.withLock { $0.removeAll { $0 === slot } }
                } else {
                    slot.entry = desired[name]!
                    slot.status = .disabled
                }
            case .reconfigure(let name):
                reconfigure(slot(name)!, with: desired[name]!, progress: progress)
            case .restartNeededForPath(let name, let running, let configured):
                logger.warning("\(desired[name]!.location): modules.\(name).path changed from \(running) to \(configured); loaded code cannot be unloaded, so \(name) keeps running the old file until eventbusd restarts",
                               metadata: ["module": "\(name)"])
            case .restartNeededForFile(let name, let path):
                logger.warning("\(desired[name]!.location): modules.\(name): \(path) was replaced since it was loaded; code loaded into eventbusd cannot be unloaded, so \(name) keeps running the old code until eventbusd restarts (with isolation: process, a reload starts a worker with the new file)",
                               metadata: ["module": "\(name)"])
            case .restart(let name, let reason):
                guard let slot = slot(name) else { continue }
                logger.info("module \(name) restarts: \(reason)", metadata: ["module": "\(name)"])
                deactivate(slot, reason: reason, becoming: .starting, progress: progress)
                activate(slot, entry: desired[name]!, progress: progress)
            case .restartNeededForCapacity(let name):
                logger.notice("modules.\(name): the new mailbox limits apply when eventbusd restarts",
                              metadata: ["module": "\(name)"])
            case .start(let name):
                let entry = desired[name]!
                let slot = slot(name) ?? makeSlot(entry, mailbox: entry.mailboxLimits(default: defaultMailbox))
                activate(slot, entry: entry, progress: progress)
            }
        }
        // Disabled modules are listed too, so status shows them.
        for entry in modules where !entry.enabled && slot(entry.name) == nil {
            _ = makeSlot(entry, mailbox: entry.mailboxLimits(default: defaultMailbox))
        }
        // Keep the registry in config order (new slots were appended; the config may reorder).
        let order = Dictionary(uniqueKeysWithValues: modules.enumerated().map { ($1.name, $0) })
        slots.withLock { $0.sort { order[$0.name, default: .max] < order[$1.name, default: .max] } }
    }

    private func makeSlot(_ entry: ModuleEntry, mailbox: MailboxLimits) -> ModuleSlot {
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
    private func activate(_ slot: ModuleSlot, entry: ModuleEntry, progress: (HostProgress) -> Void) {
        let logger = log(for: slot.name)
        slot.status = .starting
        slot.entry = entry
        if entry.isolation == .process || slot.activatedFile == nil {
            // In eventbusd, the first load stays: a later activation reuses the loaded code.
            slot.activatedFile = try? System.status(of: entry.path)
        }
        if entry.isolation == .process {
            // Never loaded here: a broken file must not touch the host's address space.
            activateInWorker(slot, entry: entry, progress: progress)
            return
        }
        let library: LoadedLibrary
        do {
            library = try loader.load(entry.path)
        } catch {
            logger.error("\(entry.location): modules.\(slot.name): \(error)")
            slot.status = .failed(error.description)
            return
        }
        if library.changedOnDisk {
            logger.warning("\(entry.path) was replaced on disk after it was loaded; \(slot.name) runs the code loaded first until eventbusd restarts")
        }
        // The section against the module's own declaration, before any of its code runs.
        let keys = library.configKeys
        if let refusal = ModuleConfigRefusal.check(entry.config, keys: keys, at: entry.configLocations) {
            refuseConfig(slot, refusal)
            return
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
        case .threw(let message)?:
            logger.error("module \(slot.name) refused: activate threw: \(message); its subscriptions were cancelled, eventbusd carries on without it")
            slot.status = .failed("activate threw: \(message)")
        case nil:
            logger.error("module \(slot.name) refused: activate did not return within \(callTimeout); it will be taken down if it ever returns")
            slot.status = .failed("activate did not return within \(callTimeout)")
        }
    }

    enum Reconfiguration: Sendable {
        case result(ReconfigureResult)
        case threw(String)
        /// The section does not fit the module's declaration: the module was not asked.
        case refused(ModuleConfigRefusal)
    }

    /// Refuses a module whose section does not fit its declaration: each problem logged as
    /// `file:line: key: problem`, then the keys it reads. Nothing of the module ran.
    func refuseConfig(_ slot: ModuleSlot, _ refusal: ModuleConfigRefusal) {
        let logger = log(for: slot.name)
        for problem in refusal.problems { logger.error("\(problem)") }
        logger.error("module \(slot.name) refused: its config section does not fit what it declares (\(refusal.validKeys)); eventbusd carries on without it")
        slot.status = .failed(refusal.summary)
    }

    private func reconfigure(_ slot: ModuleSlot, with entry: ModuleEntry, progress: (HostProgress) -> Void) {
        guard let running = slot.running else { return }
        let logger = log(for: slot.name)
        progress(.callingModule(name: slot.name, call: .reconfigure, timeLimit: callTimeout))
        let outcome: Reconfiguration?
        switch running.instance {
        case .worker(let supervisor):
            outcome = reconfigureInWorker(supervisor, entry: entry)
        case .inProcess(let module, let context):
            let keys = type(of: module.module).configKeys
            if let refusal = ModuleConfigRefusal.check(entry.config, keys: keys, at: entry.configLocations) {
                outcome = .refused(refusal)
            } else {
                outcome = reconfigureInProcess(slot, module: module, context: context, config: entry.config(declaredBy: keys))
            }
        }
        switch outcome {
        case .result(.applied)?:
            var updated = slot.entry
            updated.config = entry.config
            slot.entry = updated
            slot.configNotApplied = nil
            logger.info("module \(slot.name) applied its new config")
        case .result(.reactivate)?:
            logger.info("module \(slot.name) restarts with its new config")
            deactivate(slot, reason: "reactivating with its new config", becoming: .starting, progress: progress)
            var updated = entry
            updated.path = slot.entry.path  // a changed path needs a process restart
            activate(slot, entry: updated, progress: progress)
        case .threw(let message)?:
            logger.error("module \(slot.name) rejected its new config: \(message); it keeps running with the previous one")
            slot.configNotApplied = "the module rejected it: \(message)"
        case .refused(let refusal)?:
            for problem in refusal.problems { logger.error("\(problem)") }
            logger.error("module \(slot.name) keeps running with its previous config: the new section is refused (\(refusal.validKeys))")
            slot.configNotApplied = refusal.summary
        case nil:
            logger.error("module \(slot.name) did not answer reconfigure within \(callTimeout); its config is left as it was")
            slot.configNotApplied = "reconfigure did not return within \(callTimeout)"
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
    private func deactivate(_ slot: ModuleSlot, reason: String, becoming status: ModuleState,
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
                let waitingForRestart = if case .worker(let supervisor)? = slot.running?.instance { supervisor.snapshot.pid == nil } else { false }
                if !waitingForRestart, !slot.mailbox.drain(timeout: max(.zero, deadline - .now)) {
                    let queued = slot.mailbox.statistics.queued
                    if queued > 0 {
                        outcome.withLock { $0.undrained.append(slot.name) }
                        log(for: slot.name).warning("module \(slot.name) did not drain its mailbox within the shutdown budget: \(queued) queued event(s) are lost")
                    } else {
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
