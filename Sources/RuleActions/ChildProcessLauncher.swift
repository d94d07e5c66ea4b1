import Foundation
import Glibc
import Subprocess
import SystemCalls
import SystemPackage

/// Runs a command as a child process of eventbusd: for hosts where no systemd manager can run
/// it as a unit (a container, a development machine), or when `rules_launcher: process` says so.
///
/// Each command gets a session of its own (`setsid`), so its process group holds it and
/// everything it starts: a timeout or a stop sends SIGTERM to the whole group, then SIGKILL after
/// ``CommandSpec/stopGrace``, and what is left of the group when the command ends is killed —
/// as systemd does to a unit's cgroup. Standard output and error are read into a bounded tail
/// (``OutputTail``); nothing else of them is kept. Unit properties cannot be honoured here:
/// the engine refuses a rule that sets them under this launcher.
///
/// Threads: swift-subprocess spawns, writes standard input, reads output and waits on Swift
/// concurrency's cooperative pool; nothing here blocks a thread.
public struct ChildProcessLauncher: CommandLauncher {
    public let kind = "process"
    public let supportsUnitProperties = false

    public init() {
        Self.survivePipeWrites
    }

    /// A command that exits without reading its standard input makes the write of the event an
    /// `EPIPE` — which, with SIGPIPE's default action, would end eventbusd.
    private static let survivePipeWrites: Void = System.survivePipeSignals()

    public func run(_ spec: CommandSpec, started: @escaping @Sendable (CommandStart) -> Void) async -> CommandOutcome {
        guard let program = spec.argv.first else {
            return CommandOutcome(termination: .failedToStart("no program"), duration: .zero)
        }
        var options = PlatformOptions()
        // A session of its own: a new process group whatever else is set (swift-subprocess ignores
        // `processGroupID` together with a user), and no controlling terminal.
        options.createSession = true
        options.teardownSequence = [.send(signal: .terminate, toProcessGroup: true, allowedDurationToNextStep: spec.stopGrace)]
        if let user = spec.user {
            switch Self.identity(user: user, group: spec.group) {
            case .success(let identity):
                if identity.uid != geteuid() || identity.gid != getegid() {
                    options.userID = identity.uid
                    options.groupID = identity.gid
                    options.supplementaryGroups = identity.groups
                }
            case .failure(let problem):
                return CommandOutcome(termination: .failedToStart(problem.reason), duration: .zero)
            }
        } else if let group = spec.group {
            guard let gid = System.groupID(named: group) else {
                return CommandOutcome(termination: .failedToStart("no group named \"\(group)\""), duration: .zero)
            }
            if gid != getegid() { options.groupID = gid }
        }
        let configuration = Configuration(
            executable: .path(FilePath(program)),
            arguments: Arguments(Array(spec.argv.dropFirst())),
            environment: .inherit.updating(spec.environment.reduce(into: [:]) { $0[Environment.Key(rawValue: $1.key)!] = $1.value }),
            workingDirectory: FilePath(spec.workingDirectory ?? "/"),
            platformOptions: options)
        let start = ContinuousClock.now
        let tail = OutputTail(lines: spec.outputTailLines)
        let timedOut = TimeoutFlag()
        let outcome: Result<TerminationStatus, any Error> = await withTaskGroup(of: Result<TerminationStatus, any Error>?.self) { group in
            group.addTask {
                do {
                    let result = try await Subprocess.run(configuration, input: .inputWriter, output: .sequence,
                                                          error: .combinedWithOutput) { execution in
                        let leader = execution.processIdentifier.value
                        started(CommandStart(pid: leader, unit: nil))
                        defer { try? System.sendSignal(SIGKILL, toGroup: leader) }  // whatever of its group outlived it
                        // Written beside the reading, and never an error of the run: a command
                        // may exit, or close its input, without reading it.
                        let writer = execution.standardInputWriter
                        async let written: Void = {
                            if !spec.standardInput.isEmpty { _ = try? await writer.write(spec.standardInput) }
                            try? await writer.finish()
                        }()
                        for try await buffer in execution.standardOutput {
                            buffer.withUnsafeBytes { tail.append($0) }
                        }
                        await written
                    }
                    return .success(result.terminationStatus)
                } catch {
                    return .failure(error)
                }
            }
            if let timeout = spec.timeout {
                group.addTask {
                    try? await Task.sleep(for: timeout)
                    if !Task.isCancelled { timedOut.set() }
                    return nil
                }
            }
            let first = await group.next()!
            group.cancelAll()
            if let first { return first }
            return await group.next()!!
        }
        let duration = ContinuousClock.now - start
        let termination: CommandOutcome.Termination
        switch outcome {
        case .success(let status) where timedOut.isSet: _ = status; termination = .timedOut
        case .success(let status) where Task.isCancelled: _ = status; termination = .stopped
        case .success(.exited(let code)): termination = .exited(code)
        case .success(.signaled(let signal)): termination = .signalled(signal)
        case .failure where timedOut.isSet: termination = .timedOut
        case .failure where Task.isCancelled: termination = .stopped
        case .failure(let error): termination = .failedToStart(Self.describe(error, program: program))
        }
        return CommandOutcome(termination: termination, duration: duration, outputTail: tail.lines)
    }

    struct Identity {
        var uid: UInt32
        var gid: UInt32
        var groups: [UInt32]
    }

    struct IdentityProblem: Error {
        var reason: String
    }

    /// The user's ids and groups, from the system's user database.
    static func identity(user: String, group: String?) -> Result<Identity, IdentityProblem> {
        guard let account = System.user(named: user) else { return .failure(IdentityProblem(reason: "no user named \"\(user)\"")) }
        var gid = account.gid
        let uid = account.uid
        if let group {
            guard let groupID = System.groupID(named: group) else { return .failure(IdentityProblem(reason: "no group named \"\(group)\"")) }
            gid = groupID
        }
        var count: Int32 = 64
        var groups = [UInt32](repeating: 0, count: Int(count))
        if getgrouplist(user, gid, &groups, &count) < 0 {
            groups = [UInt32](repeating: 0, count: Int(count))
            _ = getgrouplist(user, gid, &groups, &count)
        }
        return .success(Identity(uid: uid, gid: gid, groups: Array(groups.prefix(Int(max(count, 0))))))
    }

    private static func describe(_ error: any Error, program: String) -> String {
        if let error = error as? SubprocessError, let underlying = error.underlyingError {
            return "cannot start \(program): \(String(cString: strerror(underlying.rawValue)))"
        }
        return "cannot start \(program): \(error)"
    }
}

/// Set once when a command's timeout passed, read after it ended.
final class TimeoutFlag: @unchecked Sendable {
    // @unchecked: one lock guards the one value.
    private let lock = NSLock()
    private var value = false

    func set() { lock.withLock { value = true } }
    var isSet: Bool { lock.withLock { value } }
}
