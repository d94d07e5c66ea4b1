import EventBusKit
import Logging
import ModuleIsolation

/// The process-isolated side of ``ModuleHost``: a module with `isolation: process` is run by a
/// ``WorkerSupervisor`` kept in its slot, which spawns its worker, forwards its subscriptions
/// and restarts it after a crash. Runs on the host's control queue, like the rest of
/// ``ModuleHost``; the supervisor's calls block it for at most the module call time limit.
extension ModuleHost {
    /// As ``ModuleHost/activate(_:entry:progress:)``: returns why it is not active (empty: active).
    func activateInWorker(_ slot: ModuleSlot, entry: ModuleEntry, progress: (HostProgress) -> Void) -> [ConfigError] {
        let logger = log(for: slot.name)
        // An exec module's program is trusted as a module's file is, before it is started.
        if let exec = entry.exec, let problem = HostConfig.execProblem(exec) {
            logger.error("\(entry.location): modules.\(slot.name): \(problem)")
            slot.status = .failed(problem)
            return [entry.problem(problem)]
        }
        let configuration = WorkerSupervisor.Configuration(
            name: slot.name, path: entry.path, config: entry.config, settings: entry.worker, callTimeout: callTimeout,
            handlerDuration: entry.exec == nil ? handlerTiming?(slot.name) : nil,
            exec: entry.exec, lineFormat: entry.exec == nil ? nil : .host)
        let supervisor = slot.worker ?? WorkerSupervisor(configuration: configuration, bus: bus, mailbox: slot.mailbox,
                                                         log: .bridged(to: self.logger, module: slot.name))
        slot.worker = supervisor
        progress(.callingModule(name: slot.name, call: .activate, timeLimit: callTimeout))
        switch supervisor.start(configuration) {
        case .activated(let name, let version):
            slot.didActivate(.init(instance: .worker(supervisor), reportedName: name, version: version), entry: entry)
            let kind = entry.exec == nil ? "worker" : "program"
            logger.info("module \(slot.name) active (\(name) \(version), \(entry.path), \(kind) pid \(supervisor.snapshot.pid ?? 0))")
            return []
        case .configRefused(let problems, let keysSummary):
            // Placed in the file here: the worker knows the module's declaration, not the lines.
            let refusal = ModuleConfigRefusal.refusal(problems, keysSummary: keysSummary, at: entry.configLocations)
                ?? ModuleConfigRefusal(problems: [], validKeys: keysSummary)
            return refuseConfig(slot, refusal)
        case .failed(let reason), .unloadable(let reason):
            // Worded as for a module in eventbusd, so a refusal reads the same either way.
            if reason.hasPrefix("cannot load module") {
                logger.error("\(entry.location): modules.\(slot.name): \(reason)")
            } else {
                logger.error("module \(slot.name) refused: \(reason); its worker was ended")
            }
            slot.status = .failed(reason)
            return [entry.problem(reason)]
        }
    }

    func reconfigureInWorker(_ supervisor: WorkerSupervisor, entry: ModuleEntry) -> Reconfiguration? {
        switch supervisor.reconfigure(entry.config) {
        case .applied: return .result(.applied)
        case .configRefused(let problems, let keysSummary):
            return ModuleConfigRefusal.refusal(problems, keysSummary: keysSummary, at: entry.configLocations).map(Reconfiguration.refused)
        case .reactivate: return .result(.reactivate)
        case .threw(let message): return .threw(message)
        case .noAnswer: return nil
        }
    }
}
