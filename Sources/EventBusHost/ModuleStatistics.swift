import Foundation
import ModuleIsolation

/// Where a configured module stands.
public enum ModuleState: Sendable, Equatable, CustomStringConvertible {
    /// Being loaded and activated.
    case starting
    /// Loaded, activated, receiving events.
    case active
    /// Refused: its file did not load, or its activation threw or overran. The reason is the
    /// message that was logged. The next reload tries it again.
    case failed(String)
    /// `enabled: false` in the config.
    case disabled
    /// Deactivated because eventbusd is shutting down.
    case stopped
    /// Its worker process crashed; a new one starts after the restart delay.
    case restarting
    /// An exec module whose program has not read its input for a while: its events wait in its
    /// mailbox, and past its bound are dropped (counted, and announced to it as a gap).
    case stalled

    public var description: String {
        switch self {
        case .starting: return "starting"
        case .active: return "active"
        case .failed(let reason): return "failed: \(reason)"
        case .disabled: return "disabled"
        case .stopped: return "stopped"
        case .restarting: return "restarting"
        case .stalled: return "stalled"
        }
    }
}

/// A snapshot of one module, for status displays and tests.
public struct ModuleStatistics: Sendable, Equatable {
    /// The module's key under `modules`.
    public var name: String
    public var path: String
    public var state: ModuleState
    /// What the module says it is, while active: its `name` and `version` properties.
    public var reportedName: String?
    public var version: String?
    /// Events its mailbox handed to the module, and events it dropped because the module did
    /// not keep up (each run of drops is announced to the module as a `Gap`).
    public var delivered: UInt64
    public var dropped: UInt64
    /// Events waiting for it now: in its mailbox and, for a module in a worker process, sent
    /// to the worker and not handled yet (``MailboxLimits/capacity`` bounds them all).
    public var queued: Int
    /// Their estimated bytes (``MailboxLimits/bytes`` bounds them).
    public var queuedBytes = 0
    /// Errors its handlers threw (``ModuleContext/report(_:while:)``), over every activation.
    public var errors: Int
    /// Where it runs: in a worker process (`process`) or in eventbusd (`none`).
    public var isolation: IsolationMode = .none
    /// An exec module: a program in its worker's place (shown as isolation `exec`).
    public var isExec = false
    /// Its worker's process id while one runs.
    public var workerPID: Int32?
    /// How often its worker was restarted after a crash, and the last crash (what killed it).
    public var restarts = 0
    public var lastCrash: String?
    public var lastCrashTime: Date?
    /// Set while it runs on an older config section than the file's: the last reload's section
    /// was refused (by its declaration or by the module), and why.
    public var configNotApplied: String?
}
