/// A step of start-up, reload or shutdown that may take a while, announced before it runs.
///
/// Why: under systemd, start-up must end in `READY=1` within `TimeoutStartSec=` (90 s by
/// default), yet each module's `activate` may take up to the module call time limit (30 s by
/// default) — a few slow modules would get a healthy host killed. Announcing each bounded step
/// lets the service manager extend its limit step by step (`EXTEND_TIMEOUT_USEC=`) and lets
/// `systemctl status` say what the host is waiting for. The host itself knows nothing of
/// systemd: ``HostService`` turns these into notifications.
public enum HostProgress: Sendable, Equatable, CustomStringConvertible {
    /// A call into a module, bounded by `timeLimit`.
    case callingModule(name: String, call: ModuleCallKind, timeLimit: Duration)
    /// The graceful shutdown, bounded by `budget` (the config's `shutdown_timeout`).
    case shuttingDown(budget: Duration)

    public enum ModuleCallKind: String, Sendable {
        case activate, reconfigure, deactivate
    }

    /// The longest the step can take.
    public var timeLimit: Duration {
        switch self {
        case .callingModule(_, _, let limit): limit
        case .shuttingDown(let budget): budget
        }
    }

    public var description: String {
        switch self {
        case .callingModule(let name, .activate, _): "Activating module \(name)"
        case .callingModule(let name, .reconfigure, _): "Reconfiguring module \(name)"
        case .callingModule(let name, .deactivate, _): "Deactivating module \(name)"
        case .shuttingDown: "Shutting down"
        }
    }
}
