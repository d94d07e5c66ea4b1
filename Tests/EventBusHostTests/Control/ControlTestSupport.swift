import ControlProtocol
import Foundation

/// What a run of the real `eventbus` CLI came to.
struct CLIResult: Sendable {
    /// Exit status; nil when it had not exited within the time limit (it was killed).
    var status: Int32?
    var stdout: String
    var stderr: String

    var lines: [String] { stdout.split(separator: "\n").map(String.init) }
    var jsonLines: [JSON] { lines.compactMap { try? JSON.parse($0) } }
}

/// A user created for a test (and its own group), removed at deinit; plus extra groups.
final class TestUser: @unchecked Sendable {
    let name: String
    let userID: UInt32
    let groupID: UInt32

    /// Creates user `name` (no home, no shell), member of `groups` besides its own group.
    init(_ name: String, groups: [String] = []) throws {
        var arguments = ["-M", "-s", "/usr/sbin/nologin"]
        if !groups.isEmpty { arguments += ["-G", groups.joined(separator: ",")] }
        try runTool("/usr/sbin/useradd", arguments + [name])
        self.name = name
        guard let entry = getpwnam(name) else { throw POSIXError(.ENOENT) }
        userID = entry.pointee.pw_uid
        groupID = entry.pointee.pw_gid
    }

    deinit { _ = try? runTool("/usr/sbin/userdel", [name]) }
}

/// A group created for a test, removed at deinit.
final class TestGroup: @unchecked Sendable {
    let name: String

    init(_ name: String) throws {
        try runTool("/usr/sbin/groupadd", [name])
        self.name = name
    }

    deinit { _ = try? runTool("/usr/sbin/groupdel", [name]) }
}

/// A short random suffix, so concurrent test runs on one machine do not clash on names.
func uniqueSuffix() -> String {
    String(UInt32.random(in: 0..<UInt32.max), radix: 36)
}

@discardableResult
func runTool(_ program: String, _ arguments: [String]) throws -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: program)
    process.arguments = arguments
    process.standardOutput = FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    try process.run()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else {
        throw NSError(domain: "\(program) \(arguments.joined(separator: " "))", code: Int(process.terminationStatus))
    }
    return process.terminationStatus
}

/// The real `eventbus` CLI as a child process, with its output in files (a pipe's reader could
/// block the child; files hold everything once it exited).
final class CLIProcess: @unchecked Sendable {
    let process = Process()
    private let stdoutPath: String
    private let stderrPath: String

    /// Runs `eventbus arguments…`, as `user` (through `setpriv`, with the user's groups) if given,
    /// in `workingDirectory` (default: the test's), with `environment` added to its own and
    /// the file `input` as its standard input (default: none).
    init(_ arguments: [String], as user: TestUser? = nil, in directory: TemporaryDirectory,
         workingDirectory: String? = nil, environment: [String: String] = [:], input: String? = nil) throws {
        let id = UUID().uuidString
        stdoutPath = try directory.write("cli-\(id).out", "")
        stderrPath = try directory.write("cli-\(id).err", "")
        let cli = BuildProducts.directory + "/eventbus"
        if let user {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=\(user.userID)", "--regid=\(user.groupID)", "--init-groups", "--", cli] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: cli)
            process.arguments = arguments
        }
        process.environment = ["PATH": "/usr/bin:/bin", "NO_COLOR": "1"].merging(environment) { $1 }
        process.standardInput = try input.map { try FileHandle(forReadingFrom: URL(fileURLWithPath: $0)) } ?? FileHandle.nullDevice
        if let workingDirectory { process.currentDirectoryURL = URL(fileURLWithPath: workingDirectory) }
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: stdoutPath))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
        try process.run()
    }

    var stdout: String { (try? String(contentsOfFile: stdoutPath, encoding: .utf8)) ?? "" }
    var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    /// Waits for it to exit — at most `timeout`, a bound for broken tests only; then kills it.
    func finish(timeout: Duration = patience) async -> CLIResult {
        let exited = await eventually(timeout: timeout) { !process.isRunning }
        if !exited {
            kill(process.processIdentifier, SIGKILL)
            _ = await eventually { !process.isRunning }
        }
        return CLIResult(status: exited ? process.terminationStatus : nil, stdout: stdout, stderr: stderr)
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    }
}

/// Runs `eventbus arguments…` to its end.
func eventbus(_ arguments: [String], as user: TestUser? = nil, in directory: TemporaryDirectory) async throws -> CLIResult {
    try await CLIProcess(arguments, as: user, in: directory).finish()
}

/// A raw connection to the control socket, greeted, whose reads give up after a minute instead
/// of hanging a broken test.
func rawConnection(_ socket: String) throws -> (ControlConnection, hello: JSON) {
    let connection = try ControlConnection(path: socket)
    connection.setReceiveTimeout(seconds: patienceSeconds)
    guard let hello = try connection.readJSON() else { throw POSIXError(.ECONNRESET) }
    return (connection, hello)
}

/// A control-socket client that sends `request` (a subscribe) the moment it is greeted and reads
/// on a thread of its own until `last` holds for a line or the connection ends, so a test can
/// post and look at what has arrived. Its reads wait without a bound: the connection ends with
/// the host.
final class SubscribedReader: @unchecked Sendable {
    // @unchecked: `lines` and `ended` are Collected.
    let lines = Collected<[JSON]>([])
    /// Why the reader stopped before `last` held, for a test's message.
    let ended = Collected<String?>(nil)

    init(socket: String, request: JSON, until last: @escaping @Sendable (JSON) -> Bool = { _ in false }) {
        Thread.detachNewThread { [lines, ended] in
            do {
                let (connection, _) = try rawConnection(socket)
                connection.setReceiveTimeout(seconds: 0)
                try connection.send(request)
                while let line = try connection.readJSON() {
                    lines.update { $0.append(line) }
                    if last(line) { return }
                }
                ended.update { $0 = "the host closed the connection" }
            } catch {
                ended.update { $0 = "\(error)" }
            }
        }
    }

    var events: [JSON] { lines.value.filter { $0["type"]?.stringValue == "event" } }
}

/// Sends `request` on a fresh connection and returns the answer.
func ask(_ socket: String, _ request: JSON) throws -> JSON {
    let (connection, _) = try rawConnection(socket)
    try connection.send(request)
    return try connection.readJSON() ?? .null
}

/// Waits until `count` clients are tailing (subscribed), as the host's `stats` says.
func waitForTailing(_ socket: String, count: Int) async -> Bool {
    await eventually {
        ((try? ask(socket, ["op": "stats"]))?["tailing"]?.arrayValue?.count ?? 0) >= count
    }
}

/// Posts `count` events named `name` with a field `n` = 1…count over one connection, in
/// windows of requests whose answers are read before the next window is sent.
func postMany(_ socket: String, name: String, count: Int, window: Int = 500) throws {
    let (connection, _) = try rawConnection(socket)
    var sent = 0
    while sent < count {
        let batch = min(window, count - sent)
        var bytes: [UInt8] = []
        for index in sent..<(sent + batch) {
            bytes += JSONWriter.line(["op": "post", "name": .string(name), "fields": ["n": .int(Int64(index + 1))]])
        }
        try connection.send(bytes)
        for _ in 0..<batch {
            guard let answer = try connection.readJSON(), answer["type"]?.stringValue == "posted" else {
                throw POSIXError(.EPROTO)
            }
        }
        sent += batch
    }
}

extension DaemonProcessTests.Daemon {
    /// Starts eventbusd with `config` (written to the folder) and waits until it is ready.
    static func running(_ config: String, in directory: TemporaryDirectory) async throws -> DaemonProcessTests.Daemon {
        let path = try directory.write("eventbus.yaml", config)
        let daemon = try DaemonProcessTests.Daemon(arguments: ["--config", path], in: directory)
        guard await daemon.waitFor("ready; SIGHUP reloads") else { throw POSIXError(.ETIMEDOUT) }
        return daemon
    }
}

/// A config whose control socket is `run/control.sock` in `directory`, with `control` lines
/// added to the `control:` section and `rest` after it.
func controlConfig(_ directory: TemporaryDirectory, control: String = "", rest: String = "") -> (yaml: String, socket: String) {
    let socket = directory.path + "/run/control.sock"
    return ("""
        control:
          socket: \(socket)
        \(control)
        \(rest)
        """, socket)
}
