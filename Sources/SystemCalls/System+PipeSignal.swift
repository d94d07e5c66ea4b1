import Glibc

extension System {
    /// Makes SIGPIPE end nothing: a write to a pipe or socket whose reader has gone fails with
    /// `EPIPE` instead of killing the process.
    ///
    /// Why a handler that does nothing rather than `SIG_IGN`: an ignored signal stays ignored in
    /// every program this process starts, while a handled one is back to its default after
    /// `exec` — so `yes | head` in a rule's shell line behaves as anywhere else. `SA_RESTART`:
    /// the signal interrupts no other call. Process-wide; calling it again changes nothing.
    public static func survivePipeSignals() {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { _ in }
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        sigaction(SIGPIPE, &action, nil)
    }
}
