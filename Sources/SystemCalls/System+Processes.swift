import Glibc

/// The libc calls of child processes: starting one with `posix_spawn`, signalling it and its
/// process group, and learning that it ended — for module workers, exec modules and the CLI's
/// `rules test`.
extension System {
    /// What the child gets between fork and exec, beyond its arguments and environment.
    public struct SpawnSetup: Sendable {
        /// Descriptors the child gets, in this order: its number ← this process's descriptor
        /// (`dup2`, so the copy is not close-on-exec whatever the original is — except onto its
        /// own number, where `dup2` does nothing: move such a descriptor first).
        public var descriptors: [(child: Int32, parent: Int32)] = []
        /// Standard input opened on `/dev/null`, read-only.
        public var nullInput = false
        /// Every descriptor from this number up is closed in the child, whatever its flags
        /// (`posix_spawn_file_actions_addclosefrom_np`): nothing of this process leaks into it.
        public var closeFrom: Int32?
        /// Default signal dispositions and an empty signal mask, whatever this process changed
        /// (a Dispatch thread that spawns blocks most signals).
        public var defaultSignals = false
        /// A process group of its own, led by the child: what it starts can be killed with it,
        /// and a terminal's Ctrl-C for this process does not reach it.
        public var ownProcessGroup = false

        public init() {}
    }

    /// `posix_spawn(3)` of `executable` (a path, not looked up in `PATH`): the child's pid.
    /// `arguments` start with the program's name; `environment` nil passes this process's.
    public static func spawn(_ executable: String, arguments: [String], environment: [String]? = nil,
                             setup: SpawnSetup = SpawnSetup()) throws(CallError) -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if setup.nullInput { posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0) }
        for (child, parent) in setup.descriptors { posix_spawn_file_actions_adddup2(&actions, parent, child) }
        if let closeFrom = setup.closeFrom {
            guard let addCloseFrom = Self.addCloseFrom else {
                throw CallError(call: "posix_spawn_file_actions_addclosefrom_np (glibc 2.34 or later)", path: executable, errno: ENOSYS)
            }
            let failure = addCloseFrom(&actions, closeFrom)
            guard failure == 0 else { throw CallError(call: "posix_spawn_file_actions_addclosefrom_np", path: executable, errno: failure) }
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var flags: Int32 = 0
        if setup.defaultSignals {
            var all = sigset_t()
            sigfillset(&all)
            var none = sigset_t()
            sigemptyset(&none)
            posix_spawnattr_setsigdefault(&attributes, &all)
            posix_spawnattr_setsigmask(&attributes, &none)
            flags |= Int32(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)
        }
        if setup.ownProcessGroup {
            posix_spawnattr_setpgroup(&attributes, 0)
            flags |= Int32(POSIX_SPAWN_SETPGROUP)
        }
        posix_spawnattr_setflags(&attributes, Int16(flags))
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        // posix_spawn returns its error number rather than setting errno.
        let failure: Int32
        if let environment {
            var environmentPointers: [UnsafeMutablePointer<CChar>?] = environment.map { strdup($0) } + [nil]
            defer { for pointer in environmentPointers { free(pointer) } }
            failure = posix_spawn(&pid, executable, &actions, &attributes, &argv, &environmentPointers)
        } else {
            failure = posix_spawn(&pid, executable, &actions, &attributes, &argv, environ)
        }
        guard failure == 0 else { throw CallError(call: "posix_spawn", path: executable, errno: failure) }
        return pid
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+), looked up at run time: its
    /// declaration is not visible to Swift's Glibc module.
    private static let addCloseFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    /// `kill(2)` of one process; `ESRCH` when it is gone (a zombie still takes signals).
    public static func sendSignal(_ signal: Int32, to pid: pid_t) throws(CallError) {
        _ = try call("kill", "pid \(pid)") { kill(pid, signal) }
    }

    /// `kill(2)` of every process in the group `group` leads (or led).
    public static func sendSignal(_ signal: Int32, toGroup group: pid_t) throws(CallError) {
        _ = try call("kill", "process group \(group)") { kill(-group, signal) }
    }

    /// Whether the child `pid` has ended, without reaping it (`waitid` with `WNOWAIT`): it stays
    /// a zombie, its pid and process group id taken, until ``waitForExit(of:)``. `waiting`:
    /// blocks until it has. `ECHILD`: not a child of this process, or reaped already.
    public static func hasEnded(_ pid: pid_t, waiting: Bool = false) throws(CallError) -> Bool {
        var info = siginfo_t()
        _ = try call("waitid", "pid \(pid)") { waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT | (waiting ? 0 : WNOHANG)) }
        return info._sifields._sigchld.si_pid == pid
    }

    /// `waitpid(2)` for `pid`, blocking: its wait status, or a ``CallError`` (`ECHILD`: not a
    /// child of this process, or reaped already).
    public static func waitForExit(of pid: pid_t) throws(CallError) -> Int32 {
        var status: Int32 = 0
        _ = try call("waitpid", "pid \(pid)") { waitpid(pid, &status, 0) }
        return status
    }
}
