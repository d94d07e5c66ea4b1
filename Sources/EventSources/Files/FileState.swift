#if canImport(Glibc)
import Glibc
#endif

/// What a watch remembers of one path: whether it is a directory and, when it was last stat'ed,
/// enough to tell later whether it is still the same file (device + inode) and whether its
/// content changed (mtime + size).
///
/// Why events do not stat: a `lstat` costs ~1–2 µs here, as much as all the rest of handling an
/// event, and doing it per event halved the rate at which the source drains the kernel queue
/// (measured: ~250k against ~550k events/s), making overflows (and their rescans) likelier. So an
/// event marks its path *changed since last verified* (`identity == nil`) instead, and the
/// rescan after an overflow reports such a path that still exists as `modified` — it may have
/// changed after the event that was reported. Scans (initial, new directory, rescan) do stat, so
/// untouched paths are compared exactly.
struct FileState {
    struct Identity: Equatable {
        var device: UInt64
        var inode: UInt64
        var modifiedNanoseconds: Int64
        var size: Int64
    }

    var isDirectory: Bool
    /// As last stat'ed; nil when an event has changed the path since.
    var identity: Identity?

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
        var info = stat()
        guard (following ? stat(path, &info) : lstat(path, &info)) == 0 else { return nil }
        isDirectory = (info.st_mode & S_IFMT) == S_IFDIR
        identity = Identity(
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino),
            modifiedNanoseconds: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
            size: Int64(info.st_size))
    }

    /// Both stat'ed, and the same file (or directory).
    func isSameFile(as other: FileState) -> Bool {
        guard let identity, let otherIdentity = other.identity else { return false }
        return isDirectory == other.isDirectory && identity.inode == otherIdentity.inode
            && identity.device == otherIdentity.device
    }

    /// Content changed, for a file; directories' mtimes change with their entries, which are
    /// reported on their own.
    func contentDiffers(from other: FileState) -> Bool {
        guard !isDirectory, let identity, let otherIdentity = other.identity else { return false }
        return identity.modifiedNanoseconds != otherIdentity.modifiedNanoseconds || identity.size != otherIdentity.size
    }
}

/// Path helpers for absolute, normalized paths (see `FileWatch.path`).
enum FilePath {
    static func join(_ directory: String, _ name: String) -> String {
        directory == "/" ? "/" + name : directory + "/" + name
    }

    static func parent(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    /// `path` with its leading `old` replaced by `new` (the caller checked that `path` is `old` or below it).
    /// Only moved entries are rebased, and `/` cannot move, so `old` is never `/`.
    static func rebase(_ path: String, from old: String, to new: String) -> String {
        new + String(Substring(path.utf8.dropFirst(old.utf8.count)))
    }

    /// Names in `directory`, without `.` and `..`; empty if it cannot be read.
    static func entries(of directory: String) -> [String] {
        guard let handle = opendir(directory) else { return [] }
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
}

/// What a source's subscribers have been told exists: path → ``FileState``.
///
/// Sharded by the path's hash into 64 dictionaries, and each key carries its hash. Why: a
/// `Dictionary` rebuilds itself when it grows, and one holding 100k paths took 20–40 ms to grow —
/// rehashing every String, and page-faulting a new 16 MB table in — a stall on the reader thread
/// that subscribers saw as latency, at exactly the growth points (measured with the files
/// benchmark). Shards grow one at a time, each 1/64 of the table, and rehash a cached `Int`.
struct Snapshot: Sequence {
    private struct Key: Hashable {
        let path: String
        let hash: Int

        init(_ path: String) {
            self.path = path
            hash = path.hashValue
        }

        static func == (a: Key, b: Key) -> Bool { a.hash == b.hash && a.path == b.path }
        func hash(into hasher: inout Hasher) { hasher.combine(hash) }
        /// The shard, from bits the dictionaries' own bucket index (the low bits of a hash of
        /// `hash`) does not depend on in any simple way.
        var shard: Int { Int(UInt(bitPattern: hash) >> 58) }
    }

    private var shards = [[Key: FileState]](repeating: [:], count: 64)

    subscript(path: String) -> FileState? {
        get {
            let key = Key(path)
            return shards[key.shard][key]
        }
        set {
            let key = Key(path)
            shards[key.shard][key] = newValue
        }
    }

    subscript(path: String, default value: @autoclosure () -> FileState) -> FileState {
        get {
            let key = Key(path)
            return shards[key.shard][key, default: value()]
        }
        _modify {
            let key = Key(path)
            yield &shards[key.shard][key, default: value()]
        }
    }

    @discardableResult
    mutating func removeValue(forPath path: String) -> FileState? {
        let key = Key(path)
        return shards[key.shard].removeValue(forKey: key)
    }

    mutating func removeAll() {
        for index in shards.indices { shards[index].removeAll() }
    }

    func makeIterator() -> some IteratorProtocol<(path: String, state: FileState)> {
        shards.lazy.joined().map { (path: $0.key.path, state: $0.value) }.makeIterator()
    }
}
