import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// One module of `eventbusd --check-config`, loaded in a worker started in check mode
/// (``WorkerProcess/Mode/check``) instead of in the checking process.
///
/// Why a process: loading runs the module's code — ELF constructors, Swift initializers — which
/// the ELF preflight cannot judge. One that traps or faults would kill `--check-config` with a
/// signal and no report, and leave the modules after it unchecked; one that hangs would hang it.
/// In a worker it ends or stalls only that worker: the check names the module and goes on.
///
/// The worker is spawned as a running module's is (descriptors, death signal, the resource
/// limits of `settings`), reads ``LoadCheckWire/Request`` from its socket, loads the module with
/// the host's ``ModuleLoader``, checks the section against the module's declaration, answers
/// and exits; it never makes a module instance.
public enum LoadCheck {
    public enum Outcome: Sendable, Equatable {
        /// The worker answered: loaded (with the section's problems), or refused by the loader.
        case answered(LoadCheckWire.Reply)
        /// The worker ended without an answer: loading the module crashed it (or the module
        /// called `exit`).
        case ended(WorkerProcess.Exit)
        /// No answer within the time limit: the worker was killed with SIGKILL.
        case timedOut(Duration)
        /// The worker could not be started.
        case notChecked(String)
    }

    /// Checks the module at `path` with its section `config` in a worker named `name`, waiting at
    /// most `timeout` for the answer. Always reaps the worker before it returns.
    public static func run(name: String, path: String, config: ModuleConfig, settings: WorkerSettings,
                           timeout: Duration, executable: String = WorkerProcess.defaultExecutable) -> Outcome {
        let process: WorkerProcess
        do {
            process = try WorkerProcess.spawn(executable: executable, name: name, settings: settings, mode: .check)
        } catch {
            return .notChecked(error.description)
        }
        defer { System.close(process.socket) }
        let deadline = ContinuousClock.now + timeout
        let request = JSONWriter.line(LoadCheckWire.Request(path: path, config: config).json)
        guard let answer = exchange(process.socket, sending: request, until: deadline) else {
            _ = process.reap(within: .zero)
            return .timedOut(timeout)
        }
        // End of file: the worker has answered and is exiting, or it died.
        let exit = process.reap(within: max(.zero, deadline - .now))
        if let json = try? JSON.parse(String(decoding: answer, as: UTF8.self)), let reply = LoadCheckWire.Reply(json: json) {
            return .answered(reply)
        }
        return .ended(exit)
    }

    /// Writes `request`, closes the sending direction, and reads until end of file; nil if
    /// `deadline` passes first. Never blocks past the deadline, whatever the worker does: a
    /// worker stuck before it reads leaves a large request unwritten, one stuck after it
    /// leaves the answer unsent.
    private static func exchange(_ socket: Int32, sending request: [UInt8], until deadline: ContinuousClock.Instant) -> [UInt8]? {
        var sent = 0
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let left = deadline - .now
            guard left > .zero else { return nil }
            let writing = sent < request.count
            var descriptors = [pollfd(fd: socket, events: Int16(writing ? POLLOUT : POLLIN), revents: 0)]
            let ready = (try? System.poll(&descriptors, timeout: Int32(clamping: left.clampedNanoseconds / 1_000_000 + 1))) ?? 0
            guard ready > 0 else { continue }  // the deadline: checked above
            if writing {
                let written = request.withUnsafeBytes { bytes in
                    try? System.StreamSocket.write(socket, UnsafeRawBufferPointer(rebasing: bytes[sent...]), "module worker")
                }
                switch written {
                case .wrote(let count):
                    sent += count
                    if sent == request.count { try? System.shutdown(socket, .writing) }
                case .wouldBlock: break
                case .closed, nil: sent = request.count  // the worker is gone: nothing more to send; read what it left
                }
                continue
            }
            do throws(System.CallError) {
                let count = try buffer.withUnsafeMutableBytes { raw in
                    Result { () throws(System.CallError) in try System.read(socket, into: raw) }
                }.get()
                if count == 0 { return answer }
                answer += buffer[0..<count]
            } catch {
                if error.errno != EAGAIN { return answer }
            }
        }
    }
}
