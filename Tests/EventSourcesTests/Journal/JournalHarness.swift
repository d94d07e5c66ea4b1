@_exported import TestSupport  // eventually, Collected: shared by every test target
import EventBusKit
import EventSources
import Foundation
import Synchronization

// Test harness of the journal source: a real private journald, writers, the built fixture.
// Names are prefixed (`Journal…`) because this test target is shared with the file-source tests.


/// What a test collects from the source's posting stage.
final class JournalCollected<Value: Sendable>: Sendable {
    private let storage: Mutex<Value>
    init(_ initial: Value) { storage = Mutex(initial) }
    var value: Value { storage.withLock { $0 } }
    func update<R>(_ body: (inout Value) -> R) -> R { storage.withLock { body(&$0) } }
}

/// Spawns `arguments` as a child of this process with stdin from /dev/null (or a pipe kept by
/// the caller), stdout to `stdout` if given, stderr to `stderr` if given; returns the pid.
func journalSpawn(_ arguments: [String], stdin: Int32? = nil, stdout: Int32? = nil, stderr: Int32? = nil) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    if let stdin { posix_spawn_file_actions_adddup2(&actions, stdin, 0) } else {
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    }
    if let stdout { posix_spawn_file_actions_adddup2(&actions, stdout, 1) } else {
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    }
    if let stderr { posix_spawn_file_actions_adddup2(&actions, stderr, 2) } else {
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    }
    var pid = pid_t()
    let argv = arguments.map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    let result = posix_spawn(&pid, arguments[0], &actions, nil, argv, environ)
    guard result == 0 else { throw POSIXError(POSIXErrorCode(rawValue: result) ?? .EIO) }
    return pid
}

/// A one-way channel whose ends children do not inherit (posix_spawn's dup2 onto 0/1/2 clears
/// the flag on the copy): an end leaked into another child — tests spawn in parallel — would
/// keep the reader from ever seeing EOF. A socket pair, because only it gets close-on-exec
/// atomically here (`pipe2` is not exported to Swift). `[0]` reads, `[1]` writes.
func journalPipe() throws -> [Int32] {
    var ends: [Int32] = [0, 0]
    guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
        throw POSIXError(.EIO)
    }
    return ends
}

/// Waits for the child `pid` to end; its exit status (or 128 + signal).
@discardableResult
func journalWait(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    if status & 0x7f == 0 { return (status >> 8) & 0xff }
    return 128 + (status & 0x7f)
}

/// Waits for the child `pid` to end without blocking a thread of the (small: one per core)
/// cooperative pool that the other tests need; nil if it is still running after `timeout`.
func journalWaitAsync(_ pid: pid_t, timeout: Duration = patience) async -> Int32? {
    let deadline = ContinuousClock.now + timeout
    var status: Int32 = 0
    while true {
        // Looked at once more after the deadline: a starved task may wake only past it.
        let expired = ContinuousClock.now >= deadline
        let result = waitpid(pid, &status, WNOHANG)
        if result == pid {
            if status & 0x7f == 0 { return (status >> 8) & 0xff }
            return 128 + (status & 0x7f)
        }
        if (result < 0 && errno != EINTR) || expired { return nil }
        try? await Task.sleep(for: .milliseconds(2))
    }
}

/// Runs a tool to the end; its exit status.
@discardableResult
func journalRun(_ arguments: [String], stdin: Int32? = nil) throws -> Int32 {
    journalWait(try journalSpawn(arguments, stdin: stdin))
}

/// A real systemd-journald of our own, without systemd as PID 1 (docs/platform-facts.md, The journal): in a private
/// mount namespace, `/run/systemd` and `/var/log/journal` are bind mounts of folders in a
/// temporary directory. It is our child: stopped with SIGTERM by pid and reaped with waitpid.
final class PrivateJournald: @unchecked Sendable {
    let root: TemporaryDirectory
    let pid: pid_t
    private let stopped = Atomic<Bool>(false)

    /// The folder journald writes its files to (a `<machine-id>/` folder inside): what the
    /// tests follow with `.directory(…)`.
    var logDirectory: String { root.path + "/log" }
    /// The native protocol socket (`sd_journal_send` writes here on a normal system).
    var socketPath: String { root.path + "/run/journal/socket" }
    /// The syslog socket (`logger --socket`).
    var syslogSocketPath: String { root.path + "/run/journal/dev-log" }

    init() throws {
        root = try TemporaryDirectory("eventbus-journald")
        pid = try journalSpawn(try PrivateJournaldLayout.prepare(in: root.path))
    }

    /// Waits until journald takes entries: its native socket exists and its journal file does.
    func waitUntilReady() async -> Bool {
        await eventually {
            guard access(socketPath, F_OK) == 0,
                  let machines = try? FileManager.default.contentsOfDirectory(atPath: logDirectory),
                  let machine = machines.first
            else { return false }
            return access(logDirectory + "/" + machine + "/system.journal", F_OK) == 0
        }
    }

    /// Starts a private journald and waits until it is ready.
    static func start() async throws -> PrivateJournald {
        let journald = try PrivateJournald()
        guard await journald.waitUntilReady() else {
            journald.stop()
            throw POSIXError(.ETIMEDOUT)
        }
        return journald
    }

    /// Rotates the journal files (archives the active file, opens a new one), as `journalctl
    /// --rotate` asks journald.
    func rotate() { kill(pid, SIGUSR2) }

    /// Stops journald with SIGTERM and reaps it.
    func stop() {
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        kill(pid, SIGTERM)
        journalWait(pid)
    }

    deinit { stop() }

    /// The journal files journald wrote, oldest first by name (archived files sort before the
    /// active `system.journal`).
    var journalFiles: [String] {
        let fm = FileManager.default
        guard let machine = try? fm.contentsOfDirectory(atPath: logDirectory).first else { return [] }
        let folder = logDirectory + "/" + machine
        return ((try? fm.contentsOfDirectory(atPath: folder)) ?? []).filter { $0.hasSuffix(".journal") }
            .sorted().map { folder + "/" + $0 }
    }
}

/// Writes entries with journald's native protocol: one datagram per entry, `FIELD=value` lines.
final class JournalWriter: @unchecked Sendable {
    private let fd: Int32
    private var address = sockaddr_un()

    init(socket path: String) {
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            let bytes = Array(path.utf8)
            precondition(bytes.count < buffer.count, "socket path too long")
            buffer.copyBytes(from: bytes)
        }
    }

    deinit { close(fd) }

    /// Sends one entry. Blocks while journald's queue is full, so nothing is silently lost.
    func send(_ message: String, identifier: String, priority: JournalPriority = .info,
              fields: [(String, String)] = []) {
        var text = "MESSAGE=\(message)\nSYSLOG_IDENTIFIER=\(identifier)\nPRIORITY=\(priority.rawValue)\n"
        for (name, value) in fields { text += "\(name)=\(value)\n" }
        let bytes = Array(text.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddr in
                bytes.withUnsafeBytes {
                    sendto(fd, $0.baseAddress, $0.count, 0, sockaddr, socklen_t(MemoryLayout<sockaddr_un>.size))
                }
            }
        }
        precondition(sent == bytes.count, "sending to journald failed: \(String(cString: strerror(errno)))")
    }
}

/// Writes journal files without a daemon: Journal Export Format piped into
/// systemd-journal-remote, which needs `__REALTIME_TIMESTAMP` per entry: from
/// `firstRealtime` (µs since the epoch; now unless given), `spacing` µs apart.
func journalWriteFile(_ path: String, messages: [String], identifier: String,
                      firstRealtime: UInt64? = nil, spacing: UInt64 = 1) throws {
    var export = ""
    let base = firstRealtime ?? UInt64(Date().timeIntervalSince1970 * 1e6)
    for (index, message) in messages.enumerated() {
        export += "__REALTIME_TIMESTAMP=\(base + UInt64(index) * spacing)\n__MONOTONIC_TIMESTAMP=\(index + 1)\n"
        export += "_BOOT_ID=0123456789abcdef0123456789abcdef\nMESSAGE=\(message)\n"
        export += "SYSLOG_IDENTIFIER=\(identifier)\nPRIORITY=6\n\n"
    }
    let pipeEnds = try journalPipe()
    let pid = try journalSpawn(["/lib/systemd/systemd-journal-remote", "-o", path, "-"], stdin: pipeEnds[0])
    close(pipeEnds[0])
    let bytes = Array(export.utf8)
    var offset = 0
    while offset < bytes.count {
        let written = bytes[offset...].withUnsafeBytes { write(pipeEnds[1], $0.baseAddress, $0.count) }
        guard written > 0 else { break }
        offset += written
    }
    close(pipeEnds[1])
    guard journalWait(pid) == 0 else { throw POSIXError(.EIO) }
}

/// The journal consumer the resume tests SIGKILL and restart, built next to the test bundle.
enum JournalBuildProducts {
    static let consumerFixture: String = {
        guard let path = BuiltExecutable.path(named: "journal-consumer-fixture") else {
            fatalError("journal-consumer-fixture not found near the test executable; build with swift build --build-tests first")
        }
        return path
    }()
}

/// A bus with the journal driver, and a subscription recording what it delivers.
final class JournalRecorder: @unchecked Sendable {
    let bus: Bus
    let state: TemporaryDirectory
    private let events = JournalCollected<[Event]>([])
    private var subscription: AnyCancellable?

    init(retry: Duration = .milliseconds(50)) throws {
        bus = Bus()
        state = try TemporaryDirectory("eventbus-journal-state")
        JournalDriver.register(on: bus, configuration: .init(stateDirectory: state.path, retryInterval: retry))
    }

    /// Subscribes; `onEntry` runs on the posting stage for each entry, after it is recorded.
    func follow(_ watch: JournalWatch, onEntry: (@Sendable (JournalEntry) -> Void)? = nil) throws {
        subscription = try bus.journal(watch).sink { [events] event in
            events.update { $0.append(event) }
            if let entry = event.journalEntry { onEntry?(entry) }
        }
    }

    func cancel() {
        subscription?.cancel()
        subscription = nil
    }

    var all: [Event] { events.value }
    var entries: [JournalEntry] { all.compactMap(\.journalEntry) }
    var messages: [String] { entries.map(\.message) }
    var gaps: [JournalGap] { all.compactMap(\.journalGap) }
    var statuses: [JournalStatus] { all.compactMap(\.journalStatus) }
    var isFollowing: Bool { statuses.contains { $0.state == .following } }
}
