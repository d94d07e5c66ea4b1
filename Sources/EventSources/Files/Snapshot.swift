/// What a source's subscribers have been told exists: path → ``FileState``, indexed by folder.
///
/// Sharded by the path's hash into 64 dictionaries, and each key carries its hash
/// (``HashedPath``). Why: a `Dictionary` rebuilds itself when it grows, and one holding 100k paths
/// took 20–40 ms to grow — rehashing every String, and page-faulting a new 16 MB table in — a
/// stall on the reader thread that subscribers saw as latency, at exactly the growth points
/// (measured with the files benchmark). Shards grow one at a time, each 1/64 of the table, and
/// rehash a cached `Int`.
///
/// The folder index (folder path → its entries here, sharded the same way) is what makes a
/// folder's rename or removal cost its own subtree: without it, finding what lies below a folder
/// means scanning every path, 10–14 ms per folder at 150k paths, and an `rm -rf` of a large
/// tree falls so far behind that the kernel queue overflows. Every path is in its parent's
/// entry, whether or not the parent itself is known, so a walk from a folder finds everything
/// below it.
///
/// Changes made by events name their folder (the directory of the event's watch, hashed once
/// when the watch was mapped), so indexing them costs no hash of the folder's path; other changes
/// let the snapshot find the folder, reusing the last one when it is the same.
struct Snapshot: Sequence {
    private var shards = [[HashedPath: FileState]](repeating: [:], count: 64)
    /// Folder → its entries in `shards`.
    private var folders = [[HashedPath: Set<HashedPath>]](repeating: [:], count: 64)
    /// The folder of the last path indexed without its folder named: consecutive changes are
    /// mostly in one folder, whose key then costs neither an allocation nor a hash.
    private var lastFolder = HashedPath("/")
    /// Paths held.
    private(set) var count = 0

    subscript(path: String) -> FileState? {
        get { self[HashedPath(path)] }
        set {
            let key = HashedPath(path)
            if let newValue { update(newValue, at: key) } else { removeValue(forPath: key) }
        }
    }

    subscript(path: HashedPath) -> FileState? {
        shards[path.shard][path]
    }

    /// Sets the state of `path`, which is in `folder` (the snapshot finds it when nil); returns
    /// the state it replaces.
    @discardableResult
    mutating func update(_ state: FileState, at path: HashedPath, in folder: HashedPath? = nil) -> FileState? {
        let old = shards[path.shard].updateValue(state, forKey: path)
        if old == nil { indexAdded(path, in: folder) }
        return old
    }

    /// Marks `path` (in `folder`, found when nil) as changed since it was last stat'ed, adding it
    /// if unknown. Returns whether it had a stat's identity (or was unknown) until now.
    @discardableResult
    mutating func markChanged(_ path: HashedPath, isDirectory: Bool, in folder: HashedPath? = nil) -> Bool {
        // One look-up: the entry is changed in place.
        let (wasVerified, added) = Self.markChanged(&shards[path.shard][path], isDirectory: isDirectory)
        if added { indexAdded(path, in: folder) }
        return wasVerified
    }

    private static func markChanged(_ state: inout FileState?, isDirectory: Bool) -> (wasVerified: Bool, added: Bool) {
        guard let known = state else {
            state = .changed(isDirectory: isDirectory)
            return (true, true)
        }
        guard known.identity != nil else { return (false, false) }
        state!.identity = nil
        return (true, false)
    }

    @discardableResult
    mutating func removeValue(forPath path: String) -> FileState? {
        removeValue(forPath: HashedPath(path))
    }

    /// Removes `path` (in `folder`, found when nil); returns its state, nil if it was not held.
    @discardableResult
    mutating func removeValue(forPath path: HashedPath, in folder: HashedPath? = nil) -> FileState? {
        guard let old = shards[path.shard].removeValue(forKey: path) else { return nil }
        count -= 1
        let folder = folder ?? folderKey(of: path)
        if folders[folder.shard][folder]?.remove(path) != nil, folders[folder.shard][folder]!.isEmpty {
            folders[folder.shard][folder] = nil
        }
        return old
    }

    /// Removes every path below `folder` (not `folder` itself), calling `visit` with each; costs
    /// the subtree.
    mutating func removeAll(below folder: HashedPath, visit: (HashedPath) -> Void) {
        var pending = [folder]
        while let directory = pending.popLast() {
            guard let entries = folders[directory.shard].removeValue(forKey: directory) else { continue }
            for entry in entries {
                if shards[entry.shard].removeValue(forKey: entry) != nil { count -= 1 }
                visit(entry)
                pending.append(entry)
            }
        }
    }

    /// Moves every path below `old` to the same place below `new` (not `old` itself, and `new`
    /// holds nothing yet), calling `visit` with each old and new path and the state moved (nil
    /// for a folder known only by its entries); costs the subtree.
    mutating func moveAll(below old: HashedPath, to new: HashedPath, visit: (HashedPath, HashedPath, FileState?) -> Void) {
        var pending = [(old, new)]
        while case let (from, to)? = pending.popLast() {
            guard let entries = folders[from.shard].removeValue(forKey: from) else { continue }
            var moved = Set<HashedPath>(minimumCapacity: entries.count)
            for entry in entries {
                let destination = entry.named(in: to)
                let state = shards[entry.shard].removeValue(forKey: entry)
                if let state { shards[destination.shard][destination] = state }
                moved.insert(destination)
                visit(entry, destination, state)
                pending.append((entry, destination))
            }
            folders[to.shard][to, default: []].formUnion(moved)
        }
    }

    /// The paths below `folder`, each with its state; costs the subtree.
    func entries(below folder: String) -> [(path: String, state: FileState)] {
        var found: [(path: String, state: FileState)] = []
        var pending = [HashedPath(folder)]
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

    private mutating func indexAdded(_ path: HashedPath, in folder: HashedPath?) {
        count += 1
        let folder = folder ?? folderKey(of: path)
        folders[folder.shard][folder, default: []].insert(path)
    }

    /// The key of `path`'s folder, reusing the last one when it is the same folder.
    private mutating func folderKey(of path: HashedPath) -> HashedPath {
        if !path.isInFolder(lastFolder) { lastFolder = path.folder }
        return lastFolder
    }

    func makeIterator() -> some IteratorProtocol<(path: String, state: FileState)> {
        shards.lazy.joined().map { (path: $0.key.path, state: $0.value) }.makeIterator()
    }
}
