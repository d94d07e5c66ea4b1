import EventBusKit
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

    /// A module instance that was activated, with the context it was activated with.
    struct Running: Sendable {
        let module: ModuleBox
        let context: ModuleContext
        let reportedName: String
        let version: String
    }

    struct State: Sendable {
        /// The entry in effect: what the module was last started or reconfigured with.
        var entry: ModuleEntry
        var status: ModuleState
        var running: Running?
        /// Errors counted by contexts of earlier activations.
        var retiredErrors = 0
    }

    init(entry: ModuleEntry, mailboxCapacity: Int) {
        self.name = entry.name
        self.mailbox = Mailbox(label: entry.name, capacity: mailboxCapacity)
        self.state = Mutex(State(entry: entry, status: entry.enabled ? .starting : .disabled))
    }

    var entry: ModuleEntry {
        get { state.withLock { $0.entry } }
        set { state.withLock { $0.entry = newValue } }
    }

    var running: Running? { state.withLock { $0.running } }

    var status: ModuleState {
        get { state.withLock { $0.status } }
        set { state.withLock { $0.status = newValue } }
    }

    func didActivate(_ running: Running, entry: ModuleEntry) {
        state.withLock { state in
            state.entry = entry
            state.running = running
            state.status = .active
        }
    }

    /// Forgets the running instance (after deactivation), keeping its error count.
    func retire(as status: ModuleState) {
        state.withLock { state in
            if let running = state.running { state.retiredErrors += running.context.errors }
            state.running = nil
            state.status = status
        }
    }

    var statistics: ModuleStatistics {
        let mailboxStatistics = mailbox.statistics
        return state.withLock { state in
            ModuleStatistics(
                name: name, path: state.entry.path, state: state.status,
                reportedName: state.running?.reportedName, version: state.running?.version,
                delivered: mailboxStatistics.delivered, dropped: mailboxStatistics.dropped,
                queued: mailboxStatistics.queued,
                errors: state.retiredErrors + (state.running?.context.errors ?? 0))
        }
    }
}
