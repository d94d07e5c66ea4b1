import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// An exec module's program (docs/modules-any-language.md): spawned as a worker is — its own
/// process group, default signals, nothing of the host's descriptors — but through the worker
/// executable's `--mode exec`, which sets the death signal and the resource limits
/// (``WorkerSettings``) and then becomes the program, so a program in any language gets them.
///
/// - **Standard input** is the host's end of a socketpair (``WorkerProcess/socket``): the host
///   writes it through a ``FrameChannel`` (never blocking a mailbox queue), which needs a socket
///   for `MSG_NOSIGNAL`. The program's side is shut for writing.
/// - **Standard output** is a socket the host reads lines from (``output``); its end of file is
///   the program closing it, or ending. A socket rather than a pipe so the host can stop its
///   reader (`shutdown`) when a child the program left behind still holds it open.
/// - **Standard error** is a socket too, logged line by line under the module's name (``errors``).
public struct ExecProcess: Sendable {
    /// The program's pid and the host's end of its standard input.
    public let process: WorkerProcess
    /// The host's ends (close-on-exec) of the program's standard output and standard error.
    public let output: Int32
    public let errors: Int32

    /// Starts `program` (its path first, absolute) for the module `name`, through `worker`.
    public static func spawn(program: [String], name: String, settings: WorkerSettings,
                             worker: String = WorkerProcess.defaultExecutable) throws(WorkerProcess.SpawnError) -> ExecProcess {
        guard let path = program.first else { throw WorkerProcess.SpawnError(description: "no program to run") }
        do { try System.checkAccess(path, .executable) } catch {
            throw WorkerProcess.SpawnError(description: "\(path) is not there or not executable (\(error.reason))")
        }
        do { try System.checkAccess(worker, .executable) } catch {
            throw WorkerProcess.SpawnError(description: "the module worker \(worker) is not there or not executable (\(error.reason)); install eventbus-module-worker next to eventbusd or set EVENTBUS_MODULE_WORKER")
        }
        let arguments = [worker, "--module", name, "--parent", String(getpid()), "--mode", "exec"]
            + WorkerProcess.limitArguments(settings) + ["--"] + program
        return try Spawner.shared.run { spawnNow(worker: worker, arguments: arguments) }.get()
    }

    private static func spawnNow(worker: String, arguments: [String]) -> Result<ExecProcess, WorkerProcess.SpawnError> {
        var opened: [Int32] = []
        do throws(System.CallError) {
            // Standard input, output and error: the host's end first, the child's second.
            for _ in 0..<3 {
                let (hostEnd, childEnd) = try System.socketPair()
                opened += [hostEnd, childEnd]
            }
            // Above 0…2: the child's ends because dup2 onto itself would keep close-on-exec set,
            // and a lower one could be overwritten by another's dup2 before it is copied.
            for index in opened.indices { opened[index] = try aboveStandard(opened[index]) }
            let hostEnds = [opened[0], opened[2], opened[4]]
            let childEnds = [opened[1], opened[3], opened[5]]
            try? System.shutdown(childEnds[0], .writing)
            try? System.shutdown(childEnds[1], .reading)
            try? System.shutdown(childEnds[2], .reading)
            var setup = WorkerProcess.workerSetup(closeFrom: 3)
            setup.descriptors = childEnds.enumerated().map { (child: Int32($0.offset), parent: $0.element) }
            let pid = try WorkerProcess.spawn(worker, arguments: arguments, setup: setup)
            childEnds.forEach(System.close)
            return .success(ExecProcess(process: WorkerProcess(pid: pid, socket: hostEnds[0]), output: hostEnds[1], errors: hostEnds[2]))
        } catch {
            opened.forEach(System.close)
            return .failure(WorkerProcess.SpawnError(description: "\(error)"))
        }
    }

    /// `fd`, moved to 3 or above (close-on-exec) if it is a standard descriptor's number — as
    /// in a host started with one of them closed. On a failure `fd` stays open.
    private static func aboveStandard(_ fd: Int32) throws(System.CallError) -> Int32 {
        guard fd < 3 else { return fd }
        let moved = try System.duplicate(fd, atLeast: 3)
        System.close(fd)
        return moved
    }
}
