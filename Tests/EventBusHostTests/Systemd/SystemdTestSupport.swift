import Foundation
import Synchronization

// Test harness of the systemd integration: a notification socket, a daemon started with the
// environment and descriptors systemd would give it, a private journald.

/// A Unix datagram socket the test binds, standing in for systemd's `$NOTIFY_SOCKET` (or for
/// journald's socket): a reader thread collects every datagram it receives.
final class DatagramReceiver: @unchecked Sendable {
    let path: String
    private let fd: Int32
    private let received = Collected<[String]>([])
    private let stopped = Collected<Bool>(false)
    private let reader: Thread

    /// - Parameter reading: false leaves the datagrams queued until ``startReading()``, so the
    ///   sender meets a full queue.
    init(path: String, reading: Bool = true) throws {
        self.path = path
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        self.fd = fd
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        // The reader wakes every 50 ms to notice `stop()`.
        var timeout = timeval(tv_sec: 0, tv_usec: 50_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var size: Int32 = 16 << 20
        setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, socklen_t(MemoryLayout<Int32>.size))
        let gate = DispatchSemaphore(value: reading ? 1 : 0)
        let (socketFD, collected, isStopped) = (fd, received, stopped)
        reader = Thread {
            gate.wait()
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            while !isStopped.value {
                let count = buffer.withUnsafeMutableBytes { recv(socketFD, $0.baseAddress, $0.count, 0) }
                if count > 0 {
                    let text = String(decoding: buffer[0..<count], as: UTF8.self)
                    collected.update { $0.append(text) }
                }
            }
        }
        self.gate = gate
        reader.start()
    }

    private let gate: DispatchSemaphore

    func startReading() { gate.signal() }

    /// Every datagram so far, in arrival order.
    var messages: [String] { received.value }

    func stop() {
        if !stopped.update({ stopped in defer { stopped = true }; return stopped }) { gate.signal() }
    }

    deinit {
        stop()
        while !reader.isFinished { usleep(1_000) }
        close(fd)
        unlink(path)
    }
}

/// One sd_notify datagram as its assignments (`READY=1\nSTATUS=…` → ["READY": "1", …]).
func notifyAssignments(_ message: String) -> [String: String] {
    var result: [String: String] = [:]
    for line in message.split(separator: "\n") {
        guard let equals = line.firstIndex(of: "=") else { continue }
        result[String(line[..<equals])] = String(line[line.index(after: equals)...])
    }
    return result
}

/// A child process started with `posix_spawn`: an explicit environment, stdout and stderr to a
/// file, and any extra descriptors placed where the child expects them (socket activation
/// passes its sockets as 3, 4, …).
final class SpawnedProcess: @unchecked Sendable {
    let pid: pid_t
    let outputPath: String
    private let exit = Mutex<Int32?>(nil)

    init(_ arguments: [String], environment: [String: String], outputPath: String,
         descriptors: [Int32: Int32] = [:]) throws {
        self.outputPath = outputPath
        let output = open(outputPath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard output >= 0 else { throw POSIXError(.EIO) }
        defer { close(output) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, output, 1)
        posix_spawn_file_actions_adddup2(&actions, output, 2)
        for (target, source) in descriptors { posix_spawn_file_actions_adddup2(&actions, source, target) }
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { (argv + envp).forEach { free($0) } }
        var pid = pid_t()
        let result = posix_spawn(&pid, arguments[0], &actions, nil, argv, envp)
        guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO) }
        self.pid = pid
    }

    var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

    func signal(_ signal: Int32) { kill(pid, signal) }

    /// The exit status (or 128 + signal), once it has exited; nil if it did not within the bound.
    func exitStatus(timeout: Duration = patience) async -> Int32? {
        let pid = pid
        _ = await eventually(timeout: timeout) {
            exit.withLock { status in
                if status != nil { return true }
                var raw: Int32 = 0
                guard waitpid(pid, &raw, WNOHANG) == pid else { return false }
                status = raw & 0x7f == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
                return true
            }
        }
        return exit.withLock { $0 }
    }

    deinit {
        if exit.withLock({ $0 }) == nil {
            kill(pid, SIGKILL)
            var raw: Int32 = 0
            waitpid(pid, &raw, 0)
        }
    }
}

/// The environment of this test process, with `changes` applied (nil removes a variable).
func environment(with changes: [String: String?]) -> [String: String] {
    var result = ProcessInfo.processInfo.environment
    // The test runner may itself run under systemd; only what a test sets should count.
    for name in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "JOURNAL_STREAM"] {
        result[name] = nil
    }
    for (name, value) in changes { result[name] = value }
    return result
}

/// `device:inode` of a file, as systemd writes `$JOURNAL_STREAM` for the stream it connects.
func journalStreamValue(of path: String) -> String {
    var info = stat()
    precondition(stat(path, &info) == 0, "stat \(path)")
    return "\(info.st_dev):\(info.st_ino)"
}

/// A real systemd-journald of the test's own, without systemd as PID 1 (docs/platform-facts.md, The journal): in a
/// private mount namespace, `/run/systemd` and `/var/log/journal` are bind mounts of folders in
/// a temporary directory. It is our child: stopped with SIGTERM by pid and reaped.
final class TestJournald: @unchecked Sendable {
    let root: TemporaryDirectory
    let process: SpawnedProcess

    var socketPath: String { root.path + "/run/journal/socket" }
    var logDirectory: String { root.path + "/log" }

    init() async throws {
        root = try TemporaryDirectory()
        let files = FileManager.default
        let command = try PrivateJournaldLayout.prepare(in: root.path)
        process = try SpawnedProcess(command,
                                     environment: environment(with: [:]), outputPath: root.path + "/journald.out")
        let (socketPath, logDirectory) = (socketPath, logDirectory)
        let ready = await eventually {
            guard access(socketPath, F_OK) == 0,
                  let machine = try? files.contentsOfDirectory(atPath: logDirectory).first else { return false }
            return access(logDirectory + "/" + machine + "/system.journal", F_OK) == 0
        }
        guard ready else { throw POSIXError(.ETIMEDOUT) }
    }

    /// Every entry in the journal, as `journalctl --directory … -o json --all` prints them
    /// (`--all`: fields over 4096 bytes too).
    func entries() throws -> [[String: Any]] {
        let tool = Process()
        tool.executableURL = URL(fileURLWithPath: "/usr/bin/journalctl")
        let machine = try FileManager.default.contentsOfDirectory(atPath: logDirectory).first ?? ""
        tool.arguments = ["--directory", logDirectory + "/" + machine, "-o", "json", "--all", "--no-pager"]
        let pipe = Pipe()
        tool.standardOutput = pipe
        tool.standardError = FileHandle.nullDevice
        try tool.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        tool.waitUntilExit()
        return data.split(separator: UInt8(ascii: "\n")).compactMap {
            try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any]
        }
    }

    func stop() async {
        process.signal(SIGTERM)
        _ = await process.exitStatus()
    }
}

extension TemporaryDirectory {
    /// Writes an eventbusd config, `body` plus a control socket in this folder, and returns its
    /// path: daemons of tests running in parallel must not compete for the system's socket.
    func writeDaemonConfig(_ body: String) throws -> String {
        try write("eventbus.yaml", body + "\ncontrol:\n  socket: \(path)/own-control.sock\n")
    }
}
