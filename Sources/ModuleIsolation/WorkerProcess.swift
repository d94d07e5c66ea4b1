import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// A module worker child process: spawned with `posix_spawn`, connected by a socketpair.
///
/// - **Descriptors**: the child gets its end of the socketpair as fd 3, `/dev/null` as standard
///   input, the host's standard output and error (so a Swift runtime crash message lands in the
///   host's log), and nothing else: every other descriptor is closed in the child
///   (`posix_spawn_file_actions_addclosefrom_np`), whatever flag it carries.
/// - **Dying with the host**: the worker sets `PR_SET_PDEATHSIG` (SIGKILL) first thing and then
///   checks its parent is still the host; and it exits on end of file on its socket. The death
///   signal fires when the *thread* that spawned the child exits, so every spawn runs on one
///   thread that lives as long as the process (``Spawner``), never on a pool thread that may be
///   retired.
/// - **Resource limits** (``WorkerSettings``) are passed as arguments and set by the worker with
///   `setrlimit` before it loads the module: `posix_spawn` has no way to set them in the child,
///   and setting them in the host between fork and exec is not possible from Swift safely.
/// - **Environment**: the host's, plus ``crashBacktrace`` when the operator has not chosen one.
/// - **Its process group**: the worker leads a process group of its own, which everything its
///   module starts joins unless it leaves on purpose (`setsid`, `setpgid`). When the worker
///   ends — crash, restart, reload, stop — ``reap(within:)`` kills that whole group before
///   reaping the worker, so nothing a module started outlives it. (A process that made itself a
///   session leader escapes the group; under systemd it is still in the service's cgroup and
///   ends with the service.) Being a group of its own also keeps a terminal's Ctrl-C, meant for
///   the host, away from the worker.
/// - **Its end is seen from the process** (``watchExit(_:)``), not only from the socket: a
///   module's forked child may hold the worker's end of the socket open after the worker died.
public struct WorkerProcess: Sendable {
    public let pid: pid_t
    /// The host's end of the socketpair (close-on-exec).
    public let socket: Int32

    public struct SpawnError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Where the worker executable is: `$EVENTBUS_MODULE_WORKER`, else next to the running
    /// executable (eventbusd, or a test runner in the build folder).
    public static var defaultExecutable: String {
        if let path = ProcessInfo.processInfo.environment["EVENTBUS_MODULE_WORKER"], !path.isEmpty { return path }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return (exe as NSString).deletingLastPathComponent + "/eventbus-module-worker"
    }

    /// What the worker is started to do.
    public enum Mode: Sendable {
        /// Load and run the module for the host (``WorkerSession``).
        case run
        /// Load the module, check its config section and report, without activating it: one
        /// module of `eventbusd --check-config` (``LoadCheck``).
        case check
    }

    /// Spawns `executable` for the module `name`.
    public static func spawn(executable: String, name: String, settings: WorkerSettings,
                             mode: Mode = .run) throws(SpawnError) -> WorkerProcess {
        do { try System.checkAccess(executable, .executable) } catch {
            throw SpawnError(description: "the module worker \(executable) is not there or not executable (\(error.reason)); install eventbus-module-worker next to eventbusd or set EVENTBUS_MODULE_WORKER")
        }
        var arguments = [executable, "--module", name, "--parent", String(getpid())]
        if mode == .check { arguments += ["--mode", "check"] }
        arguments += limitArguments(settings)
        let result = Spawner.shared.run { () -> Result<WorkerProcess, SpawnError> in
            spawnNow(executable: executable, arguments: arguments)
        }
        return try result.get()
    }

    /// The worker's arguments for the resource limits it sets itself.
    static func limitArguments(_ settings: WorkerSettings) -> [String] {
        var arguments: [String] = []
        if let memory = settings.memoryLimit { arguments += ["--memory-limit", String(memory)] }
        if let cpu = settings.cpuLimitSeconds { arguments += ["--cpu-limit", String(cpu)] }
        if let files = settings.openFilesLimit { arguments += ["--open-files", String(files)] }
        return arguments
    }

    private static func spawnNow(executable: String, arguments: [String]) -> Result<WorkerProcess, SpawnError> {
        do throws(System.CallError) {
            let (hostEnd, firstChildEnd) = try System.socketPair()
            var childEnd = firstChildEnd
            if childEnd == 3 {
                // dup2(3, 3) would keep close-on-exec set: move it first.
                defer { System.close(3) }
                do { childEnd = try System.duplicate(3, atLeast: 10) } catch {
                    System.close(hostEnd)
                    throw error
                }
            }
            defer { System.close(childEnd) }
            var setup = workerSetup(closeFrom: 4)
            setup.nullInput = true
            setup.descriptors = [(child: 3, parent: childEnd)]
            do {
                return .success(WorkerProcess(pid: try spawn(executable, arguments: arguments, setup: setup), socket: hostEnd))
            } catch {
                System.close(hostEnd)
                throw error
            }
        } catch {
            return .failure(SpawnError(description: "\(error)"))
        }
    }

    /// How every worker is spawned: every descriptor from `closeFrom` up closed (the caller
    /// adds the ones it hands over), signal dispositions and mask reset to default, a process
    /// group of its own.
    static func workerSetup(closeFrom: Int32) -> System.SpawnSetup {
        var setup = System.SpawnSetup()
        setup.closeFrom = closeFrom
        setup.defaultSignals = true
        setup.ownProcessGroup = true
        return setup
    }

    /// `posix_spawn` of `executable` with the worker environment.
    static func spawn(_ executable: String, arguments: [String], setup: System.SpawnSetup) throws(System.CallError) -> pid_t {
        try System.spawn(executable, arguments: arguments, environment: workerEnvironment, setup: setup)
    }

    /// How a crashing worker's Swift runtime reports, unless `SWIFT_BACKTRACE` is set already:
    /// a backtrace with files and lines (what a module's author needs) but without inlined frames,
    /// which take full symbolication 0.5 s to seconds on a loaded machine — the time between a
    /// crash and the host's restart (measured: 490–720 ms full, 120–170 ms fast). Never
    /// interactive: nobody is at a worker's terminal.
    public static let crashBacktrace = "SWIFT_BACKTRACE=enable=yes,interactive=no,symbolicate=fast"

    /// ``crashBacktrace`` with the backtracer to use: `swift-backtrace` next to the worker (an
    /// installed package ships it there, beside the Swift runtime it bundles), else the
    /// toolchain's, where the runtime looks by itself. With neither, backtraces are off: the
    /// runtime would otherwise log "unable to locate swift-backtrace" at every worker start.
    static func crashBacktraceSetting(workerDirectory: String, runtimeBacktracer: String?) -> String {
        let shipped = workerDirectory + "/swift-backtrace"
        if System.isAccessible(shipped, .executable) { return crashBacktrace + ",swift-backtrace=" + shipped }
        if let runtimeBacktracer, System.isAccessible(runtimeBacktracer, .executable) { return crashBacktrace }
        return "SWIFT_BACKTRACE=enable=no"
    }

    /// Where the Swift runtime looks for its backtracer when not told: relative to
    /// libswiftCore.so (`<prefix>/lib/swift/linux/libswiftCore.so` →
    /// `<prefix>/libexec/swift/linux/swift-backtrace`).
    static var runtimeBacktracer: String? {
        // The loaded libswiftCore.so, as the process's own mappings name it (dladdr's Dl_info
        // is not visible to Swift's Glibc module).
        // Read to its end by System.readFile: /proc files have no size for Foundation to go by.
        guard let bytes = try? System.readFile("/proc/self/maps") else { return nil }
        let maps = String(decoding: bytes, as: UTF8.self)
        guard let line = maps.split(separator: "\n").first(where: { $0.hasSuffix("/libswiftCore.so") }),
              let slash = line.firstIndex(of: "/") else { return nil }
        var prefix = String(line[slash...])
        for _ in 0..<4 { prefix = (prefix as NSString).deletingLastPathComponent }
        return prefix + "/libexec/swift/linux/swift-backtrace"
    }

    /// The host's environment (read once: eventbusd never changes it) with the crash backtrace
    /// setting (``crashBacktraceSetting(workerDirectory:runtimeBacktracer:)``).
    private static let workerEnvironment: [String] = {
        var entries = ProcessInfo.processInfo.environment.map { "\($0.key)=\($0.value)" }
        if ProcessInfo.processInfo.environment["SWIFT_BACKTRACE"] == nil {
            entries.append(crashBacktraceSetting(workerDirectory: (defaultExecutable as NSString).deletingLastPathComponent,
                                                 runtimeBacktracer: runtimeBacktracer))
        }
        return entries
    }()

    /// How a worker ended.
    public enum Exit: Sendable, Equatable, CustomStringConvertible {
        case exited(Int32)
        case signaled(Int32)

        public var description: String {
            switch self {
            case .exited(let status): return "exited with status \(status)"
            case .signaled(let signal): return "killed by signal \(signal) (\(Self.signalName(signal)))"
            }
        }

        static func signalName(_ signal: Int32) -> String {
            switch signal {
            case SIGKILL: return "SIGKILL"
            case SIGILL: return "SIGILL"
            case SIGTRAP: return "SIGTRAP"
            case SIGABRT: return "SIGABRT"
            case SIGBUS: return "SIGBUS"
            case SIGFPE: return "SIGFPE"
            case SIGSEGV: return "SIGSEGV"
            case SIGTERM: return "SIGTERM"
            case SIGXCPU: return "SIGXCPU"
            default: return strsignal(signal).map { String(cString: $0) } ?? "signal \(signal)"
            }
        }
    }

    /// Waits for the worker to end, at most `timeout`; then kills it with SIGKILL. Either way
    /// kills what is left of its process group (what its module started) and reaps it.
    public func reap(within timeout: Duration) -> Exit {
        reapMeasured(within: timeout).exit
    }

    /// ``reap(within:)``, with the CPU time the worker used (user and system, in seconds) when
    /// it could be read before the worker was reaped.
    public func reapMeasured(within timeout: Duration) -> (exit: Exit, cpuSeconds: Double?) {
        let deadline = ContinuousClock.now + timeout
        while !hasEnded, ContinuousClock.now < deadline { System.sleep(for: .milliseconds(1)) }
        let cpu = hasEnded ? cpuSeconds : nil
        // The worker is a zombie holding its pid (so the group id cannot be reused), or out of time.
        try? System.sendSignal(SIGKILL, toGroup: pid)
        try? System.sendSignal(SIGKILL, to: pid)  // in case its module moved it out of its own group
        // A failure: not our child any more.
        guard let status = try? System.waitForExit(of: pid) else { return (.exited(-1), cpu) }
        return (Self.exit(from: status), cpu)
    }

    /// utime + stime of `/proc/PID/stat` (fields 14 and 15, in clock ticks), which a zombie
    /// still has.
    private var cpuSeconds: Double? {
        guard let bytes = try? System.readPrefix("/proc/\(pid)/stat", count: 1024) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self)
        // After the command's closing parenthesis: field 3 (state) onwards.
        guard let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Whether the worker has ended (it stays unreaped until ``reap(within:)``).
    var hasEnded: Bool {
        // A failure: not our child, reaped already.
        (try? System.hasEnded(pid)) ?? true
    }

    /// Calls `ended` (on a thread of its own) when the worker process ends, without reaping it.
    /// Every worker ends — the host kills what it gives up on — so the thread always returns.
    public func watchExit(_ ended: @escaping @Sendable () -> Void) {
        let pid = pid
        let thread = Thread {
            System.nameCurrentThread("eventbus.reap")
            // Returns when it has ended, or fails when it is no child of ours any more (reaped).
            _ = try? System.hasEnded(pid, waiting: true)
            ended()
        }
        thread.stackSize = 64 * 1024
        thread.start()
    }

    public func kill(_ signal: Int32) {
        try? System.sendSignal(signal, to: pid)
    }

    private static func exit(from status: Int32) -> Exit {
        // WIFEXITED / WTERMSIG by hand: the macros are not imported into Swift.
        let signal = status & 0x7F
        if signal == 0 { return .exited((status >> 8) & 0xFF) }
        return .signaled(signal)
    }
}

/// One thread, alive for the whole process, on which every worker is spawned (see
/// ``WorkerProcess``: the parent-death signal follows the spawning thread).
final class Spawner: @unchecked Sendable {
    static let shared = Spawner()

    private let condition = NSCondition()
    private var jobs: [() -> Void] = []

    private init() {
        let thread = Thread { [self] in
            System.nameCurrentThread("eventbus.spawn")
            while true {
                condition.lock()
                while jobs.isEmpty { condition.wait() }
                let job = jobs.removeFirst()
                condition.unlock()
                job()
            }
        }
        thread.start()
    }

    func run<T>(_ body: @escaping () -> T) -> T {
        let done = DispatchSemaphore(value: 0)
        var result: T?
        condition.withLock {
            jobs.append {
                result = body()
                done.signal()
            }
            condition.signal()
        }
        done.wait()
        return result!
    }
}
