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

    /// Where the handler writes its line about a sent signal: allocated by ``install()``,
    /// because a signal handler may not allocate.
    nonisolated(unsafe) private static var line = UnsafeMutablePointer<UInt8>.allocate(capacity: 256)

    public static func install() {
        _ = processIsEnding.load(ordering: .relaxed)  // initialized here, not first in a handler
        _ = line
        let table = previous
        for signal in signals {
            var old = sigaction()
            sigaction(signal, nil, &old)
            table[Int(signal)] = old
            var action = sigaction()
            action.__sigaction_handler.sa_sigaction = handle
            // SA_NODEFER, as the runtime's own handler has: the signal must not be blocked
            // while the runtime's handler runs. Its memory server (the thread that reads this
            // process's memory for swift-backtrace) inherits the mask and catches its own
            // faults with a SIGSEGV handler; with SIGSEGV blocked, its first read of a bad
            // address killed the process in the middle of the report (it stopped at
            // "Registers:"), and swift-backtrace — holding both ends of the memory server's
            // socket, and every descriptor it inherited — waited on it for ever.
            action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER
            sigemptyset(&action.sa_mask)
            sigaction(signal, &action, nil)
        }
    }

    private static let handle: @convention(c) (Int32, UnsafeMutablePointer<siginfo_t>?, UnsafeMutableRawPointer?) -> Void = { signal, info, context in
        FatalSignals.processIsEnding.store(true, ordering: .sequentiallyConsistent)
        if let info { FatalSignals.sayWhoSent(signal, info.pointee) }
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

    /// For a signal another process sent (`kill`, `sigqueue`, `tgkill`: `si_code` ≤ 0), one line
    /// on standard error before the runtime's report, which reads the sender's pid as a fault
    /// address ("Bad pointer dereference at 0x5979"). Async-signal-safe: digits into the buffer
    /// ``install()`` allocated, one `write`.
    private static func sayWhoSent(_ signal: Int32, _ info: siginfo_t) {
        guard info.si_code <= 0 else { return }
        let sender = info._sifields._kill
        var length = 0
        func append(_ text: StaticString) {
            text.withUTF8Buffer { bytes in
                for byte in bytes where length < 255 { line[length] = byte; length += 1 }
            }
        }
        func append(_ number: Int64) {
            var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &digits) { buffer in
                var value = number < 0 ? -number : number
                var count = 0
                repeat {
                    buffer[count] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                    count += 1
                } while value > 0 && count < 19
                if number < 0, length < 255 { line[length] = UInt8(ascii: "-"); length += 1 }
                while count > 0, length < 255 {
                    count -= 1
                    line[length] = buffer[count]
                    length += 1
                }
            }
        }
        append("*** Signal ")
        append(Int64(signal))
        append(" was sent by process ")
        append(Int64(sender.si_pid))
        append(" (uid ")
        append(Int64(sender.si_uid))
        append("), not raised by a fault here: the report below reads its pid as an address ***\n")
        _ = write(2, line, length)
    }
}
