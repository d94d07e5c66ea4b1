#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// What a watch remembers of one path: whether it is a directory and, when it was last stat'ed,
/// enough to tell later whether it is still the same file (device + inode) and whether it
/// changed (mtime, ctime, size: ctime moves with every write and attribute change, even one
/// that puts mtime back).
///
/// Why events do not stat: a `lstat` costs ~1–2 µs here, as much as all the rest of handling an
/// event, and doing it per event halved the rate at which the source drains the kernel queue
/// (measured: ~250k against ~550k events/s), making overflows (and their rescans) likelier. So an
/// event marks its path *changed by an event* (`identity == nil`) instead, and nothing stats it
/// until a rescan needs to know: then its ctime tells whether its last change came before the
/// last moment every queued event had been handled (``FileChangeMonitor/settledBefore``) — its
/// event was reported — or may have come after it, and is reported `modified`. Scans (initial,
/// new directory, rescan) do stat, so untouched paths are compared exactly.
struct FileState {
    struct Identity: Equatable {
        var device: UInt64
        var inode: UInt64
        var modifiedNanoseconds: Int64
        var changedNanoseconds: Int64
        var size: Int64
    }

    /// As last stat'ed; nil when an event has changed the path since. Declared before
    /// `isDirectory` so that the flag fits in the optional's padding: 48 bytes a state, not 56,
    /// in a snapshot table of every watched path.
    var identity: Identity?
    var isDirectory: Bool

    /// Changed by an event since it was last stat'ed (or never stat'ed).
    static func changed(isDirectory: Bool) -> FileState {
        FileState(isDirectory: isDirectory, identity: nil)
    }

    init(isDirectory: Bool, identity: Identity?) {
        self.isDirectory = isDirectory
        self.identity = identity
    }

    /// `lstat` (or `stat` when `following` symlinks, for a watch's root); nil if it fails.
    init?(path: String, following: Bool = false) {
        guard let state = try? Self.reading(path, following: following) else { return nil }
        self = state
    }

    /// ``init(path:following:)`` for a caller that reports why it failed.
    static func reading(_ path: String, following: Bool = false) throws(System.CallError) -> FileState {
        let status = try following ? System.status(of: path) : System.linkStatus(of: path)
        return FileState(isDirectory: status.isDirectory, identity: Identity(
            device: status.device, inode: status.inode,
            modifiedNanoseconds: Int64(status.modifiedSeconds) * 1_000_000_000 + Int64(status.modifiedNanoseconds),
            changedNanoseconds: Int64(status.changedSeconds) * 1_000_000_000 + Int64(status.changedNanoseconds),
            size: status.size))
    }

    /// Both stat'ed, and the same file (or directory).
    func isSameFile(as other: FileState) -> Bool {
        guard let identity, let otherIdentity = other.identity else { return false }
        return isDirectory == other.isDirectory && identity.inode == otherIdentity.inode
            && identity.device == otherIdentity.device
    }

    /// Written or its attributes changed, for a file (mtime, ctime or size differ); directories'
    /// times change with their entries, which are reported on their own.
    func contentDiffers(from other: FileState) -> Bool {
        guard !isDirectory, let identity, let otherIdentity = other.identity else { return false }
        return identity.modifiedNanoseconds != otherIdentity.modifiedNanoseconds
            || identity.changedNanoseconds != otherIdentity.changedNanoseconds || identity.size != otherIdentity.size
    }

    /// Whether the file may have changed after every event queued before `cutoff` was handled:
    /// its ctime is not older than `cutoff` (see ``FileChangeMonitor/settledBefore``).
    func isRecent(cutoff: Int64) -> Bool {
        (identity?.changedNanoseconds ?? .max) >= cutoff
    }

    /// `CLOCK_REALTIME` in nanoseconds: the clock file times are stamped with.
    static func realtimeNow() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
    }
}

/// Path helpers for absolute, normalized paths (see `FileWatch.path`).
enum FilePath {
    static func join(_ directory: String, _ name: String) -> String {
        directory == "/" ? "/" + name : directory + "/" + name
    }

    static func parent(of path: String) -> String {
        guard let slash = path.utf8.lastIndex(of: UInt8(ascii: "/")), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    /// Names in `directory`, without `.` and `..`; empty if it cannot be read.
    static func entries(of directory: String) -> [String] {
        (try? System.directoryEntries(directory)) ?? []
    }
}
