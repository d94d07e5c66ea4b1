#if canImport(Glibc)
import Glibc
#endif

/// What a watch remembers of one path: whether it is a directory and, when it was last stat'ed,
/// enough to tell later whether it is still the same file (device + inode) and whether it
/// changed (mtime, ctime, size: ctime moves with every write and attribute change, even one
/// that puts mtime back).
///
/// Why events do not stat: a `lstat` costs ~1–2 µs here, as much as all the rest of handling an
/// event, and doing it per event halved the rate at which the source drains the kernel queue
/// (measured: ~250k against ~550k events/s), making overflows (and their rescans) likelier. So an
/// event marks its path *changed since last verified* (`identity == nil`) instead, and the
/// source stats such paths later, in bounded batches, when the kernel's queue is empty (see
/// `FileWatchSource.verifyChanged`). Only a path still unverified when events are lost is
/// reported by the rescan as `modified` without proof — it may have changed after the event
/// that was reported. Scans (initial, new directory, rescan) do stat, so untouched paths are
/// compared exactly.
struct FileState {
    struct Identity: Equatable {
        var device: UInt64
        var inode: UInt64
        var modifiedNanoseconds: Int64
        var changedNanoseconds: Int64
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
            changedNanoseconds: Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec),
            size: Int64(info.st_size))
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

    /// Whether this stat may predate a change whose event was not handled yet: its ctime is
    /// not older than `cutoff` (see `FileWatchSource.verifyChanged`).
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

/// What a source's subscribers have been told exists: path → ``FileState``, indexed by folder.
///
/// Sharded by the path's hash into 64 dictionaries, and each key carries its hash. Why: a
/// `Dictionary` rebuilds itself when it grows, and one holding 100k paths took 20–40 ms to grow —
/// rehashing every String, and page-faulting a new 16 MB table in — a stall on the reader thread
/// that subscribers saw as latency, at exactly the growth points (measured with the files
/// benchmark). Shards grow one at a time, each 1/64 of the table, and rehash a cached `Int`.
///
/// The folder index (folder path → names of its entries here, sharded the same way) is what
/// makes a folder's rename or removal cost its own subtree: without it, finding what lies below
/// a folder meant scanning every path, 10–14 ms per folder at 150k paths (issue 18), and an
/// `rm -rf` of a large tree fell so far behind that the kernel queue overflowed. Every path is
/// in its parent's entry, whether or not the parent itself is known, so a walk from a folder
/// finds everything below it.
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
    /// Folder → its entries in `shards` (their keys: the path and its hash, computed once).
    private var folders = [[Key: Set<Key>]](repeating: [:], count: 64)
    /// The folder of the last path added or removed: consecutive changes are mostly in one
    /// folder, whose key then costs neither an allocation nor a hash.
    private var lastFolder = Key("/")
    /// Paths held.
    private(set) var count = 0

    subscript(path: String) -> FileState? {
        get {
            let key = Key(path)
            return shards[key.shard][key]
        }
        set {
            let key = Key(path)
            guard let newValue else {
                remove(key)
                return
            }
            if shards[key.shard].updateValue(newValue, forKey: key) == nil { indexAdded(key) }
        }
    }

    /// Marks `path` as changed since it was last stat'ed, adding it if unknown. Returns whether
    /// it was verified (or unknown) until now.
    mutating func markChanged(_ path: String, isDirectory: Bool) -> Bool {
        let key = Key(path)
        guard let known = shards[key.shard][key] else {
            shards[key.shard][key] = .changed(isDirectory: isDirectory)
            indexAdded(key)
            return true
        }
        guard known.identity != nil else { return false }
        shards[key.shard][key]!.identity = nil
        return true
    }

    @discardableResult
    mutating func removeValue(forPath path: String) -> FileState? {
        remove(Key(path))
    }

    /// Removes every path below `folder` (not `folder` itself), calling `visit` with each; costs
    /// the subtree.
    mutating func removeAll(below folder: String, visit: (String) -> Void) {
        var pending = [Key(folder)]
        while let directory = pending.popLast() {
            guard let entries = folders[directory.shard].removeValue(forKey: directory) else { continue }
            for entry in entries {
                if shards[entry.shard].removeValue(forKey: entry) != nil { count -= 1 }
                visit(entry.path)
                pending.append(entry)
            }
        }
    }

    /// Moves every path below `old` to the same place below `new` (not `old` itself, and `new`
    /// holds nothing yet), calling `visit` with each old and new path and the state moved (nil
    /// for a folder known only by its entries); costs the subtree.
    mutating func moveAll(below old: String, to new: String, visit: (String, String, FileState?) -> Void) {
        var pending = [(Key(old), Key(new))]
        while case let (from, to)? = pending.popLast() {
            guard let entries = folders[from.shard].removeValue(forKey: from) else { continue }
            var moved = Set<Key>(minimumCapacity: entries.count)
            for entry in entries {
                let destination = Key(FilePath.rebase(entry.path, from: old, to: new))
                let state = shards[entry.shard].removeValue(forKey: entry)
                if let state { shards[destination.shard][destination] = state }
                moved.insert(destination)
                visit(entry.path, destination.path, state)
                pending.append((entry, destination))
            }
            folders[to.shard][to, default: []].formUnion(moved)
        }
    }

    /// The paths below `folder`, each with its state; costs the subtree.
    func entries(below folder: String) -> [(path: String, state: FileState)] {
        var found: [(path: String, state: FileState)] = []
        var pending = [Key(folder)]
        while let directory = pending.popLast() {
            guard let entries = folders[directory.shard][directory] else { continue }
            for entry in entries {
                if let state = shards[entry.shard][entry] { found.append((entry.path, state)) }
                pending.append(entry)
            }
        }
        return found
    }

    mutating func removeAll() {
        for index in shards.indices {
            shards[index].removeAll()
            folders[index].removeAll()
        }
        count = 0
    }

    @discardableResult
    private mutating func remove(_ key: Key) -> FileState? {
        guard let old = shards[key.shard].removeValue(forKey: key) else { return nil }
        count -= 1
        let folder = folderKey(of: key.path)
        if folders[folder.shard][folder]?.remove(key) != nil, folders[folder.shard][folder]!.isEmpty {
            folders[folder.shard][folder] = nil
        }
        return old
    }

    private mutating func indexAdded(_ key: Key) {
        count += 1
        let folder = folderKey(of: key.path)
        folders[folder.shard][folder, default: []].insert(key)
    }

    /// The key of `path`'s folder, reusing the last one when it is the same folder.
    private mutating func folderKey(of path: String) -> Key {
        let utf8 = path.utf8
        let slash = utf8.lastIndex(of: UInt8(ascii: "/")) ?? utf8.startIndex
        let end = slash == utf8.startIndex ? utf8.index(after: slash) : slash  // `/x` is in `/`
        if utf8[..<end].elementsEqual(lastFolder.path.utf8) { return lastFolder }
        lastFolder = Key(String(path[..<end]))
        return lastFolder
    }

    func makeIterator() -> some IteratorProtocol<(path: String, state: FileState)> {
        shards.lazy.joined().map { (path: $0.key.path, state: $0.value) }.makeIterator()
    }
}
