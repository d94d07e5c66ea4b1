/// What became of a reload: the new config runs, or it was refused and the old one runs on.
/// Told to whoever asked — the log for SIGHUP, the `eventbus reload` client (and so systemd's
/// `ExecReload=`, whose exit status operators and config management read) for a control request.
public enum ReloadOutcome: Sendable, Equatable {
    /// The summary the log gets ("reloaded FILE: 2 module(s) active, 1 timer(s)").
    case applied(String)
    /// Why the new config was not applied (a config error names file, line and key).
    case refused(String)
}

extension ReloadOutcome {
    public var isApplied: Bool {
        if case .applied = self { return true }
        return false
    }
}
