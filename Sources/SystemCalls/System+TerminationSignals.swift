import Glibc

extension System {
    /// Lets SIGINT, SIGTERM and SIGHUP reach the process (with their default action: it ends).
    ///
    /// Why: a process inherits the blocked-signal mask of the thread that started it, and a
    /// parent that spawns from a Dispatch worker thread (which blocks most signals) — a test
    /// runner, a supervisor written with Foundation's `Process` — hands over a mask in which
    /// SIGTERM is blocked: `eventbus tail` then ignored `kill` and Ctrl-C alike, and waited for
    /// SIGKILL. Called first thing by the CLI.
    public static func unblockTerminationSignals() {
        var signals = sigset_t()
        sigemptyset(&signals)
        for signal in [SIGINT, SIGTERM, SIGHUP] { sigaddset(&signals, signal) }
        pthread_sigmask(SIG_UNBLOCK, &signals, nil)
    }
}
