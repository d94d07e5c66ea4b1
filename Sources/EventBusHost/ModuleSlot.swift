import Dispatch
import EventBusKit
import ModuleIsolation
import Synchronization

/// One configured module: its mailbox, and — while it is active — its instance and context.
///
/// The slot outlives activations: a module reactivated on reload keeps its mailbox (and so its
/// delivery counts and its place in the event order), and its error count carries over.
/// Mutated only by ``ModuleHost`` on the host's control queue; the lock is for statistics
/// readers on other threads.
final class ModuleSlot: Sendable {
    let name: String
    let mailbox: Mailbox
    private let state: Mutex<State>

    /// A module instance that was activated: in this process with the context it was activated
    /// with, or in a worker process its supervisor runs.
    struct Running: Sendable {
        enum Instance: Sendable {
            case inProcess(ModuleBox, ModuleContext)
            case worker(WorkerSupervisor)
        }

        let instance: Instance
        let reportedName: String
        let version: String

        /// Errors counted by an in-process module's context (a worker's are in its supervisor).
        var inProcessErrors: Int {
            if case .inProcess(_, let context) = instance { return context.errors }
            return 0
        }
    }

    struct State: Sendable {
        /// The entry in effect: what the module was last started or reconfigured with.
        var entry: ModuleEntry
        var status: ModuleState
        var running: Running?
        /// Errors counted by contexts of earlier activations.
        var retiredErrors = 0
        /// The supervisor of the module's workers, once it ran with `isolation: process`; kept
        /// across activations so restarts and the last crash stay visible.
        var worker: WorkerSupervisor?
        /// The module's file as it was when last activated: a reload compares it with the file
        /// now, so a module rebuilt in place is noticed.
        var activatedFile: System.FileStatus?
        /// Why the config section in the file is not the one it runs with (a refused reload).
        var configNotApplied: String?
    }

    /// The pool the mailboxes of process-isolated modules run on: Dispatch's global queue,
    /// as many threads as CPUs. Their mailbox queues only forward events to a worker's socket
    /// and never block (a full socket holds the mailbox instead), so they need no thread of
    /// their own; on the overcommitting pool every burst that found its threads busy left
    /// another idle thread behind for good, and the host's memory grew with them. An in-process
    /// module's mailbox runs the module's code, which may block, so it stays on the
    /// overcommitting pool.
    static let forwardingPool = DispatchQueue.global()

    /// The mailbox's pool follows the isolation the module starts with; like its limits, it is
    /// not changed by a reload.
    init(entry: ModuleEntry, mailbox limits: MailboxLimits) {
        self.name = entry.name
        self.mailbox = Mailbox(label: entry.name, capacity: limits.events, byteCapacity: limits.bytes,
                               pool: entry.isolation == .process ? Self.forwardingPool : nil)
        self.state = Mutex(State(entry: entry, status: entry.enabled ? .starting : .disabled))
    }

    var entry: ModuleEntry {
        get { state.withLock { $0.entry } }
        set { state.withLock { $0.entry = newValue } }
    }

    var running: Running? { state.withLock { $0.running } }

    var activatedFile: System.FileStatus? {
        get { state.withLock { $0.activatedFile } }
        set { state.withLock { $0.activatedFile = newValue } }
    }

    /// Whether the file at the module's path is another version than the one last activated
    /// (false when either cannot be read: the next start says what is wrong with it).
    var fileChangedSinceActivation: Bool {
        guard let activated = activatedFile, let now = try? System.status(of: entry.path) else { return false }
        return !now.isSameVersion(as: activated)
    }

    var worker: WorkerSupervisor? {
        get { state.withLock { $0.worker } }
        set { state.withLock { $0.worker = newValue } }
    }

    /// Running — and, in a worker, not given up after reaching its start limit (a reload then
    /// starts it again, as it retries any refused module).
    var isActive: Bool {
        guard let running else { return false }
        if case .worker(let supervisor) = running.instance { return supervisor.snapshot.gaveUp == nil }
        return true
    }

    var configNotApplied: String? {
        get { state.withLock { $0.configNotApplied } }
        set { state.withLock { $0.configNotApplied = newValue } }
    }

    var status: ModuleState {
        get { state.withLock { $0.status } }
        set { state.withLock { $0.status = newValue } }
    }

    func didActivate(_ running: Running, entry: ModuleEntry) {
        state.withLock { state in
            state.entry = entry
            state.running = running
            state.status = .active
            state.configNotApplied = nil
        }
    }

    /// Forgets the running instance (after deactivation), keeping its error count.
    func retire(as status: ModuleState) {
        state.withLock { state in
            if let running = state.running { state.retiredErrors += running.inProcessErrors }
            state.running = nil
            state.status = status
        }
    }

    var statistics: ModuleStatistics {
        let mailboxStatistics = mailbox.statistics
        let (state, worker) = self.state.withLock { ($0, $0.worker) }
        let snapshot = worker?.snapshot
        var statistics = ModuleStatistics(
            name: name, path: state.entry.path, state: state.status,
            reportedName: state.running?.reportedName, version: state.running?.version,
            delivered: mailboxStatistics.delivered, dropped: mailboxStatistics.dropped,
            queued: mailboxStatistics.queued,
            errors: state.retiredErrors + (state.running?.inProcessErrors ?? 0) + (snapshot?.errors ?? 0))
        // What left the mailbox for the module's worker and is not handled yet — on its way, in
        // the worker's queue — still waits, and counts against the same bounds.
        statistics.delivered -= min(statistics.delivered, UInt64(mailboxStatistics.heldElsewhere))
        statistics.queued += mailboxStatistics.heldElsewhere
        statistics.queuedBytes = mailboxStatistics.queuedBytes + mailboxStatistics.heldElsewhereBytes
        if state.status == .active { statistics.configNotApplied = state.configNotApplied }
        statistics.isolation = state.entry.isolation
        statistics.isExec = state.entry.exec != nil
        if let snapshot {
            statistics.restarts = snapshot.restarts
            statistics.lastCrash = snapshot.lastCrash
            statistics.lastCrashTime = snapshot.lastCrashTime
            if case .worker = state.running?.instance, state.status == .active {
                statistics.workerPID = snapshot.pid
                // A restarted worker loaded the module's file again: what it says it is now.
                statistics.reportedName = snapshot.reportedName ?? statistics.reportedName
                statistics.version = snapshot.version ?? statistics.version
                if let reason = snapshot.gaveUp {
                    statistics.state = .failed(reason)
                } else if snapshot.restarting {
                    statistics.state = .restarting
                } else if snapshot.stalled {
                    statistics.state = .stalled
                }
            }
        }
        return statistics
    }
}
