import Foundation
import Glibc
import SystemCalls
import RuleActions

/// One run through the rule runner, the client's side: connect, send the request, read the
/// answers, send `stop` when asked to, and end with the run's outcome — on a thread of its own,
/// since every read blocks until the runner says something.
final class RuleRunnerCall: @unchecked Sendable {
    // @unchecked: `fd`, `stopping` and `stopSent` are behind `lock`; the rest is immutable.
    private let path: String
    private let request: RuleRunnerRequest
    private let started: @Sendable (CommandStart) -> Void
    private let lock = NSLock()
    private var fd: Int32 = -1
    private var stopping = false
    private var stopSent = false

    init(path: String, request: RuleRunnerRequest, started: @escaping @Sendable (CommandStart) -> Void) {
        self.path = path
        self.request = request
        self.started = started
    }

    /// Runs the call on a new thread; `finished` gets the outcome, once.
    func start(_ finished: @escaping @Sendable (CommandOutcome) -> Void) {
        let thread = Thread { [self] in finished(converse()) }
        thread.name = "eventbus.runner"
        thread.start()
    }

    /// Asks the runner to stop the run (now, or as soon as the request is sent).
    func stop() {
        lock.withLock {
            stopping = true
            sendStopLocked()
        }
    }

    private func sendStopLocked() {
        guard fd >= 0, !stopSent else { return }
        stopSent = true
        UnixStream.write(RuleRunnerRequest.stop.line, to: fd)
    }

    private func converse() -> CommandOutcome {
        let begun = ContinuousClock.now
        func failed(_ reason: String) -> CommandOutcome {
            CommandOutcome(termination: .failedToStart("eventbus-rule-runner: \(reason)"), duration: .zero)
        }
        let connected: Int32
        switch UnixStream.connect(to: path) {
        case .success(let fd): connected = fd
        case .failure(let error): return failed(error.message)
        }
        defer { lock.withLock { System.close(connected); fd = -1 } }
        // Under the lock, so a stop asked for meanwhile follows the request rather than preceding it.
        let sent = lock.withLock {
            guard UnixStream.write(request.line, to: connected) else { return false }
            fd = connected
            if stopping { sendStopLocked() }
            return true
        }
        guard sent else { return failed("the request could not be sent") }
        var lines = BoundedLineReader(fd: connected)
        while true {
            let line: [UInt8]
            switch lines.next() {
            case .failure(let error): return failed(error.message)
            case .success(nil):
                if lock.withLock({ stopping }) {
                    return CommandOutcome(termination: .stopped, duration: ContinuousClock.now - begun)
                }
                return failed("the connection ended without the run's outcome (journalctl -u 'eventbus-rule-runner@*' says why)")
            case .success(let read?): line = read
            }
            switch line.withUnsafeBufferPointer(RuleRunnerAnswer.decode) {
            case .failure(let error): return failed(error.message)
            case .success(.started(let start)): started(start)
            case .success(.finished(let outcome)): return outcome
            case .success(.error(let error)): return failed(error.message)
            }
        }
    }
}
