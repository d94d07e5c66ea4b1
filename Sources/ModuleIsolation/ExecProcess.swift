import Foundation
#if canImport(Glibc)
import Glibc
#endif

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
        guard let path = program.first, access(path, X_OK) == 0 else {
            throw WorkerProcess.SpawnError(description: "\(program.first ?? "(no program)") is not there or not executable (\(String(cString: strerror(errno))))")
        }
        guard access(worker, X_OK) == 0 else {
            throw WorkerProcess.SpawnError(description: "the module worker \(worker) is not there or not executable (\(String(cString: strerror(errno)))); install eventbus-module-worker next to eventbusd or set EVENTBUS_MODULE_WORKER")
        }
        let arguments = [worker, "--module", name, "--parent", String(getpid()), "--mode", "exec"]
            + WorkerProcess.limitArguments(settings) + ["--"] + program
        return try Spawner.shared.run { spawnNow(worker: worker, arguments: arguments) }.get()
    }

    private static func spawnNow(worker: String, arguments: [String]) -> Result<ExecProcess, WorkerProcess.SpawnError> {
        func failure(_ call: String) -> Result<ExecProcess, WorkerProcess.SpawnError> {
            .failure(WorkerProcess.SpawnError(description: "\(call): \(String(cString: strerror(errno)))"))
        }
        var input: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &input) == 0 else { return failure("socketpair") }
        var output: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &output) == 0 else {
            input.forEach { Glibc.close($0) }
            return failure("socketpair")
        }
        var errors: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &errors) == 0 else {
            (input + output).forEach { Glibc.close($0) }
            return failure("socketpair")
        }
        // The child's ends, above 0…2: dup2 onto itself would keep close-on-exec set, and a lower
        // one could be overwritten by another's dup2 before it is copied.
        let childEnds = [input[1], output[1], errors[1]].map(aboveStandard)
        shutdown(childEnds[0], Int32(SHUT_WR))
        shutdown(childEnds[1], Int32(SHUT_RD))
        shutdown(childEnds[2], Int32(SHUT_RD))
        defer { childEnds.forEach { Glibc.close($0) } }
        let spawned = WorkerProcess.posixSpawn(executable: worker, arguments: arguments) { actions in
            for (target, end) in childEnds.enumerated() { posix_spawn_file_actions_adddup2(&actions, end, Int32(target)) }
            return 3
        }
        switch spawned {
        case .success(let pid):
            return .success(ExecProcess(process: WorkerProcess(pid: pid, socket: aboveStandard(input[0])),
                                        output: aboveStandard(output[0]), errors: aboveStandard(errors[0])))
        case .failure(let error):
            [input[0], output[0], errors[0]].forEach { Glibc.close($0) }
            return .failure(error)
        }
    }

    /// `fd`, moved to 3 or above (close-on-exec) if it is a standard descriptor's number — as
    /// in a host started with one of them closed.
    private static func aboveStandard(_ fd: Int32) -> Int32 {
        guard fd < 3 else { return fd }
        let moved = fcntl(fd, F_DUPFD_CLOEXEC, 3)
        Glibc.close(fd)
        return moved
    }
}
