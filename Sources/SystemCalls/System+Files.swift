import Glibc

/// The libc calls on paths and regular files: what the webhook outbox's log, the module
/// inspection, state files and config checks do to the file system. Each throws ``CallError``
/// (the path in it, `errno` read right after the call); those a signal can interrupt go through
/// ``call(_:_:_:)``, so an interrupted call is made again the one way the code base does it.
extension System {
    /// What `access(2)` checks, with the process's real user and group ids.
    public enum Access: Sendable {
        case exists
        case readable
        case writable
        case executable

        var mode: Int32 {
            switch self {
            case .exists: F_OK
            case .readable: R_OK
            case .writable: W_OK
            case .executable: X_OK
            }
        }
    }

    /// `access(2)`: throws when `path` is missing or, for `.readable`, `.writable` and
    /// `.executable`, not permitted — with the reason a message can give (`ENOENT`, `EACCES`).
    public static func checkAccess(_ path: String, _ access: Access = .exists) throws(CallError) {
        _ = try call("access", path) { Glibc.access(path, access.mode) }
    }

    /// ``checkAccess(_:_:)`` as a question, for callers to whom the reason does not matter.
    public static func isAccessible(_ path: String, _ access: Access = .exists) -> Bool {
        (try? checkAccess(path, access)) != nil
    }

    /// `open(2)` with `O_CLOEXEC` added: a descriptor a module's or rule's program must not inherit.
    /// `mode` counts only with `O_CREAT`.
    public static func openFile(_ path: String, _ flags: Int32, mode: mode_t = 0) throws(CallError) -> Int32 {
        try call("open", path) { Glibc.open(path, flags | O_CLOEXEC, mode) }
    }

    /// The size of an open file, as `fstat(2)` gives it.
    public static func size(of fd: Int32, path: @autoclosure () -> String = "") throws(CallError) -> Int64 {
        var info = stat()
        _ = try call("fstat", path()) { fstat(fd, &info) }
        return Int64(info.st_size)
    }

    /// `pread(2)`: at most `buffer.count` bytes from `offset`, without moving the file position;
    /// 0 at the end of the file.
    public static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, at offset: Int64,
                            path: @autoclosure () -> String = "") throws(CallError) -> Int {
        try call("pread", path()) { pread(fd, buffer.baseAddress, buffer.count, off_t(offset)) }
    }

    /// `fdatasync(2)`: the file's bytes and size are on disk once it returns.
    public static func syncData(_ fd: Int32, path: @autoclosure () -> String = "") throws(CallError) {
        _ = try call("fdatasync", path()) { fdatasync(fd) }
    }

    /// `fsync(2)`: everything of the file — for a folder, the names in it — is on disk once it returns.
    public static func sync(_ fd: Int32, path: @autoclosure () -> String = "") throws(CallError) {
        _ = try call("fsync", path()) { fsync(fd) }
    }

    /// `ftruncate(2)`.
    public static func truncate(_ fd: Int32, to size: Int64, path: @autoclosure () -> String = "") throws(CallError) {
        _ = try call("ftruncate", path()) { ftruncate(fd, off_t(size)) }
    }

    /// `flock(2)` with `LOCK_EX | LOCK_NB`: held until the descriptor is closed; `EWOULDBLOCK`
    /// when another open file description holds it.
    public static func lockExclusively(_ fd: Int32, path: @autoclosure () -> String = "") throws(CallError) {
        _ = try call("flock", path()) { flock(fd, LOCK_EX | LOCK_NB) }
    }

    /// `rename(2)`: atomic within one file system.
    public static func rename(_ path: String, to newPath: String) throws(CallError) {
        _ = try call("rename", newPath) { Glibc.rename(path, newPath) }
    }

    /// `unlink(2)`.
    public static func removeFile(_ path: String) throws(CallError) {
        _ = try call("unlink", path) { unlink(path) }
    }

    /// `mkdir(2)`; the umask narrows `mode`.
    public static func makeDirectory(_ path: String, mode: mode_t) throws(CallError) {
        _ = try call("mkdir", path) { mkdir(path, mode) }
    }

    /// The names in the folder at `path`, without `.` and `..`, in the order `readdir(3)` gives them.
    public static func directoryEntries(_ path: String) throws(CallError) -> [String] {
        guard let handle = opendir(path) else { throw CallError(call: "opendir", path: path, errno: errno) }
        defer { closedir(handle) }
        var names: [String] = []
        while let entry = readdir(handle) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    /// `chmod(2)`.
    public static func changeMode(of path: String, to mode: mode_t) throws(CallError) {
        _ = try call("chmod", path) { chmod(path, mode) }
    }
}
