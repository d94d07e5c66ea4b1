import Glibc
import Synchronization

/// Makes every fatal signal end the process — eventbusd or a module worker — whoever sent it.
///
/// The Swift runtime's crash handler (enabled through `SWIFT_BACKTRACE`) prints the backtrace
/// and then *returns*, counting on the faulting instruction to fault again with the default
/// action in place. That holds for a real fault, but not for a signal another process sent:
/// execution simply went on. A worker sent `kill -SEGV` kept running after "Program crashed"
/// and the host never heard of a crash; eventbusd sent SIGABRT by systemd's watchdog kept
/// running until `TimeoutAbortSec=` ran out and SIGKILL came, 30 s later. So each fatal signal
/// gets a handler that lets the runtime's handler report first, then restores the default
/// action and re-raises: the process ends with that signal.
///
/// Threads: ``install()`` runs once at start, before the module is loaded; the handler runs
/// on whichever thread took the signal and calls only async-signal-safe functions.
public enum FatalSignals {
    static let signals: [Int32] = [SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS, SIGQUIT]

    /// Set as soon as a fatal signal arrives: the process is ending, whatever its other threads
    /// still do while the runtime writes its crash report (they run on for milliseconds, and a
    /// SIGABRT from systemd's watchdog comes with a SIGCONT that wakes them all). What persists
    /// a promise — the host's journal positions — checks it and writes nothing more, so an entry
    /// such a thread posts to a bus about to vanish is read again by the next host.
    public static let processIsEnding = Atomic<Bool>(false)

    /// The actions in place before ours (the runtime's), by signal number. Written once by
    /// ``install()`` before any handler of ours can run; read-only afterwards.
    nonisolated(unsafe) private static var previous = UnsafeMutablePointer<sigaction>.allocate(capacity: 65)  // signals 1…64

    public static func install() {
        _ = processIsEnding.load(ordering: .relaxed)  // initialized here, not first in a handler
        let table = previous
        for signal in signals {
            var old = sigaction()
            sigaction(signal, nil, &old)
            table[Int(signal)] = old
            var action = sigaction()
            action.__sigaction_handler.sa_sigaction = handle
            action.sa_flags = SA_SIGINFO | SA_ONSTACK
            sigemptyset(&action.sa_mask)
            sigaction(signal, &action, nil)
        }
    }

    private static let handle: @convention(c) (Int32, UnsafeMutablePointer<siginfo_t>?, UnsafeMutableRawPointer?) -> Void = { signal, info, context in
        FatalSignals.processIsEnding.store(true, ordering: .sequentiallyConsistent)
        let old = FatalSignals.previous[Int(signal)]
        let handler = unsafeBitCast(old.__sigaction_handler.sa_handler, to: Int.self)
        if handler != 0 && handler != 1 {  // neither SIG_DFL nor SIG_IGN: the runtime's
            if old.sa_flags & SA_SIGINFO != 0 {
                old.__sigaction_handler.sa_sigaction?(signal, info, context)
            } else {
                old.__sigaction_handler.sa_handler?(signal)
            }
        }
        Glibc.signal(signal, SIG_DFL)
        var unblocked = sigset_t()
        sigemptyset(&unblocked)
        sigaddset(&unblocked, signal)
        pthread_sigmask(SIG_UNBLOCK, &unblocked, nil)
        raise(signal)
    }
}
