import Glibc

/// The operating-system boundary of eventbusd and the module worker: their libc calls (stat,
/// realpath, read, dlopen, dlsym …) live here and in `System` extensions beside the code that
/// needs them, as in SwiftNIO's `System.swift`. Everything else works with the Swift values and
/// errors these return, so `errno` and `dlerror()` are read right after the call that set them
/// and nowhere else. A target of its own, depending on nothing but libc, so that every process
/// (host, worker, CLI) can share it.
public enum System {
    /// What `stat(2)` says about a path, reduced to what the host decides on.
    public struct FileStatus: Equatable, Sendable {
        public var mode: UInt32
        public var ownerID: UInt32
        public var groupID: UInt32
        public var device: UInt64
        public var inode: UInt64
        public var size: Int64
        public var modifiedSeconds: Int
        public var modifiedNanoseconds: Int
        /// The inode's last change (`st_ctim`): its bytes, or its mode, owner, links or name.
        public var changedSeconds: Int
        public var changedNanoseconds: Int

        init(_ info: stat) {
            mode = UInt32(info.st_mode)
            ownerID = UInt32(info.st_uid)
            groupID = UInt32(info.st_gid)
            device = UInt64(info.st_dev)
            inode = UInt64(info.st_ino)
            size = Int64(info.st_size)
            modifiedSeconds = Int(info.st_mtim.tv_sec)
            modifiedNanoseconds = Int(info.st_mtim.tv_nsec)
            changedSeconds = Int(info.st_ctim.tv_sec)
            changedNanoseconds = Int(info.st_ctim.tv_nsec)
        }

        public var isDirectory: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFDIR) }
        public var isRegularFile: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFREG) }
        public var isWorldWritable: Bool { mode & UInt32(S_IWOTH) != 0 }
        public var isSticky: Bool { mode & UInt32(S_ISVTX) != 0 }
        public var permissions: String { "0" + String(mode & 0o7777, radix: 8) }

        /// Whether both describe the same version of a file: the same inode, not written since.
        /// A build that replaces a module (a new file renamed over it, or rewritten in place)
        /// changes one or the other; `chmod` and `chown` change neither.
        public func isSameVersion(as other: FileStatus) -> Bool {
            device == other.device && inode == other.inode
                && modifiedSeconds == other.modifiedSeconds && modifiedNanoseconds == other.modifiedNanoseconds
        }
    }

    /// A failed system call, with the path it was about and `strerror` of its `errno`.
    public struct CallError: Error, CustomStringConvertible, Sendable {
        public var call: String
        public var path: String
        public var errno: Int32

        public init(call: String, path: String, errno: Int32) {
            self.call = call
            self.path = path
            self.errno = errno
        }

        public var isNoSuchFile: Bool { errno == ENOENT || errno == ENOTDIR }
        public var reason: String { String(cString: strerror(errno)) }
        public var description: String { "\(call)(\(path)): \(reason)" }
    }

    /// `stat(2)`: follows symbolic links.
    public static func status(of path: String) throws(CallError) -> FileStatus {
        var info = stat()
        guard stat(path, &info) == 0 else { throw CallError(call: "stat", path: path, errno: errno) }
        return FileStatus(info)
    }

    /// `lstat(2)`: a symbolic link's own status, not its target's.
    public static func linkStatus(of path: String) throws(CallError) -> FileStatus {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw CallError(call: "lstat", path: path, errno: errno) }
        return FileStatus(info)
    }

    /// `realpath(3)`: the absolute path with every symbolic link, `.` and `..` resolved.
    public static func realPath(_ path: String) throws(CallError) -> String {
        guard let resolved = realpath(path, nil) else { throw CallError(call: "realpath", path: path, errno: errno) }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The whole file, read with `open`/`read`.
    public static func readFile(_ path: String) throws(CallError) -> [UInt8] {
        try read(path, limit: nil)
    }

    /// At most the first `count` bytes of a file (fewer if it is shorter).
    public static func readPrefix(_ path: String, count: Int) throws(CallError) -> [UInt8] {
        try read(path, limit: count)
    }

    private static func read(_ path: String, limit: Int?) throws(CallError) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw CallError(call: "open", path: path, errno: errno) }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while limit.map({ bytes.count < $0 }) ?? true {
            let wanted = min(chunk.count, limit.map { $0 - bytes.count } ?? chunk.count)
            let got = try call("read", path) { chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, wanted) } }
            if got == 0 { break }
            bytes.append(contentsOf: chunk[0..<got])
        }
        return bytes
    }

    /// The effective user id: files owned by it (or by root) are trusted.
    public static var effectiveUserID: UInt32 { UInt32(geteuid()) }

    /// `dlopen(3)` with `RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE`.
    ///
    /// Why these flags: NOW resolves every symbol at load, so a module built against another SDK
    /// fails here with the missing symbol's name instead of crashing on first call; LOCAL keeps
    /// one module's symbols from satisfying another's; NODELETE keeps the code mapped for the
    /// life of the process, because the Swift runtime caches conformance records and metadata
    /// from it (docs/platform-facts.md, Loading modules). The handle is deliberately never passed to `dlclose`.
    public static func openLibrary(_ path: String) throws(CallError.DynamicLoader) -> UnsafeMutableRawPointer {
        _ = dlerror()  // clear a stale message
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) else {
            throw CallError.DynamicLoader(message: lastDynamicLoaderError() ?? "dlopen failed without a message")
        }
        return handle
    }

    /// `dlsym(3)`: the address of `symbol` in the library, or nil when it does not export it.
    public static func symbol(_ symbol: String, in handle: UnsafeMutableRawPointer) -> UnsafeMutableRawPointer? {
        _ = dlerror()
        return dlsym(handle, symbol)
    }

    private static func lastDynamicLoaderError() -> String? {
        guard let message = dlerror() else { return nil }
        return String(cString: message)
    }
}

extension System.CallError {
    /// A failure of the dynamic loader: `dlerror()`'s message, which already names the file.
    public struct DynamicLoader: Error, CustomStringConvertible, Sendable {
        public var message: String
        public var description: String { message }
    }
}

extension System {
    /// `RLIMIT_NOFILE`: how many descriptors the process may have open.
    public struct OpenFileLimit: Equatable, Sendable {
        public var soft: Int
        public var hard: Int
    }

    public static func openFileLimit() -> OpenFileLimit {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return OpenFileLimit(soft: 1024, hard: 1024) }
        return OpenFileLimit(soft: Int(clamping: limit.rlim_cur), hard: Int(clamping: limit.rlim_max))
    }

    /// `setrlimit(2)` of `resource` (`RLIMIT_DATA`, `RLIMIT_CPU`, …): the limits the module worker
    /// sets on itself before it loads a module, which `posix_spawn` cannot set for it.
    public static func setResourceLimit(_ resource: __rlimit_resource, soft: UInt64, hard: UInt64) throws(CallError) {
        var limit = rlimit(rlim_cur: rlim_t(soft), rlim_max: rlim_t(hard))
        _ = try call("setrlimit", "resource \(resource.rawValue)") { setrlimit(Int32(resource.rawValue), &limit) }
    }

    /// Raises the soft limit to the hard one. Returns the limits before and after.
    public static func raiseOpenFileLimit() -> (before: OpenFileLimit, after: OpenFileLimit) {
        let before = openFileLimit()
        var limit = rlimit()
        if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0, limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max
            _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        }
        return (before, openFileLimit())
    }
}
