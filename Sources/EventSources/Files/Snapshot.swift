/// What a source's subscribers have been told exists: path → ``FileState``, indexed by folder.
///
/// Sharded by the path's hash into 64 parts (``SnapshotShard``), each key carrying its hash
/// (``HashedPath``). Why shards: a table rebuilds itself when it grows, and one holding 100k
/// paths took 20–40 ms to grow — a stall on the reader thread that subscribers saw as latency, at
/// exactly the growth points (measured with the files benchmark). Shards grow one at a time, each
/// 1/64 of the whole.
///
/// The folder index (folder → its entries, linked through them) is what makes a folder's rename
/// or removal cost its own subtree: without it, finding what lies below a folder means scanning
/// every path, 10–14 ms per folder at 150k paths, and an `rm -rf` of a large tree falls so far
/// behind that the kernel queue overflows. Every path is in its parent's entries, whether or not
/// the parent itself is known, so a walk from a folder finds everything below it.
///
/// What a created file costs the snapshot — an index probe, an entry appended, two links — is,
/// besides the kernel's `read`, the largest part of what the reader does per event (see
/// ``SnapshotShard`` for why it is not a `Dictionary`).
///
/// Changes made by events name their folder (the directory of the event's watch, hashed once
/// when the watch was mapped), so indexing them costs no hash of the folder's path; other changes
/// let the snapshot find the folder, reusing the last one when it is the same.
struct Snapshot: Sequence {
    private typealias Reference = SnapshotShard.Reference

    private var shards = [SnapshotShard](repeating: SnapshotShard(), count: SnapshotShard.count)
    /// Folder → its first entry (the one added last), sharded by the folder's hash.
    private var folders = [[HashedPath: Reference]](repeating: [:], count: SnapshotShard.count)
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
        shards[path.shard].slot(of: path).map { shards[path.shard][$0].state }
    }

    /// Sets the state of `path`, which is in `folder` (the snapshot finds it when nil); returns
    /// the state it replaces.
    @discardableResult
    mutating func update(_ state: FileState, at path: HashedPath, in folder: HashedPath? = nil) -> FileState? {
        let shard = path.shard
        guard let slot = shards[shard].slot(of: path) else {
            add(path, state, in: folder)
            return nil
        }
        let old = shards[shard][slot].state
        shards[shard][slot].state = state
        return old
    }

    /// Marks `path` (in `folder`, found when nil) as changed since it was last stat'ed, adding it
    /// if unknown. Returns whether it had a stat's identity (or was unknown) until now.
    @discardableResult
    mutating func markChanged(_ path: HashedPath, isDirectory: Bool, in folder: HashedPath? = nil) -> Bool {
        let shard = path.shard
        guard let slot = shards[shard].slot(of: path) else {
            add(path, .changed(isDirectory: isDirectory), in: folder)
            return true
        }
        guard shards[shard][slot].state.identity != nil else { return false }
        shards[shard][slot].state.identity = nil
        return true
    }

    @discardableResult
    mutating func removeValue(forPath path: String) -> FileState? {
        removeValue(forPath: HashedPath(path))
    }

    /// Removes `path` (in `folder`, found when nil); returns its state, nil if it was not held.
    @discardableResult
    mutating func removeValue(forPath path: HashedPath, in folder: HashedPath? = nil) -> FileState? {
        let shard = path.shard
        guard let slot = shards[shard].slot(of: path) else { return nil }
        let entry = shards[shard][slot]
        unlink(entry, from: folder ?? folderKey(of: path))
        shards[shard].remove(slot: slot)
        count -= 1
        return entry.state
    }

    /// Removes every path below `folder` (not `folder` itself), calling `visit` with each; costs
    /// the subtree.
    mutating func removeAll(below folder: HashedPath, visit: (HashedPath) -> Void) {
        var pending = [folder]
        while let directory = pending.popLast() {
            guard var next = folders[directory.shard].removeValue(forKey: directory) else { continue }
            while next != SnapshotShard.none {
                let entry = take(next)
                visit(entry.path)
                pending.append(entry.path)
                next = entry.next
            }
        }
    }

    /// Moves every path below `old` to the same place below `new` (not `old` itself, and `new`
    /// holds nothing yet), calling `visit` with each old and new path and the state moved; costs
    /// the subtree.
    mutating func moveAll(below old: HashedPath, to new: HashedPath, visit: (HashedPath, HashedPath, FileState) -> Void) {
        var pending = [(old, new)]
        while case let (from, to)? = pending.popLast() {
            guard var next = folders[from.shard].removeValue(forKey: from) else { continue }
            while next != SnapshotShard.none {
                let entry = take(next)
                let destination = entry.path.named(in: to)
                update(entry.state, at: destination, in: to)
                visit(entry.path, destination, entry.state)
                pending.append((entry.path, destination))
                next = entry.next
            }
        }
    }

    /// The paths below `folder`, each with its state; costs the subtree.
    func entries(below folder: String) -> [(path: String, state: FileState)] {
        var found: [(path: String, state: FileState)] = []
        var pending = [HashedPath(folder)]
        while let directory = pending.popLast() {
            var next = folders[directory.shard][directory] ?? SnapshotShard.none
            while next != SnapshotShard.none {
                let entry = self[next]
                found.append((entry.path.path, entry.state))
                pending.append(entry.path)
                next = entry.next
            }
        }
        return found
    }

    mutating func removeAll() {
        self = Snapshot()
    }

    /// Adds `path`, not held yet, as the first of its folder's entries.
    private mutating func add(_ path: HashedPath, _ state: FileState, in folder: HashedPath?) {
        let folder = folder ?? folderKey(of: path)
        let first = folders[folder.shard][folder] ?? SnapshotShard.none
        let added = shards[path.shard].insert(path, state, next: first)
        if first != SnapshotShard.none { self[first].previous = added }
        folders[folder.shard][folder] = added
        count += 1
    }

    /// Takes `entry` out of the entries of `folder`, its folder.
    private mutating func unlink(_ entry: SnapshotShard.Entry, from folder: HashedPath) {
        if entry.previous == SnapshotShard.none {
            folders[folder.shard][folder] = entry.next == SnapshotShard.none ? nil : entry.next
        } else {
            self[entry.previous].next = entry.next
        }
        if entry.next != SnapshotShard.none { self[entry.next].previous = entry.previous }
    }

    /// The entry `reference` names, in whichever shard.
    private subscript(reference: Reference) -> SnapshotShard.Entry {
        get {
            let (shard, slot) = SnapshotShard.split(reference)
            return shards[shard][slot]
        }
        _modify {
            let (shard, slot) = SnapshotShard.split(reference)
            yield &shards[shard][slot]
        }
    }

    /// Frees the entry `reference` names, whose folder's entries are being dropped whole; returns it.
    private mutating func take(_ reference: Reference) -> SnapshotShard.Entry {
        let (shard, slot) = SnapshotShard.split(reference)
        let entry = shards[shard][slot]
        shards[shard].remove(slot: slot)
        count -= 1
        return entry
    }

    /// The key of `path`'s folder, reusing the last one when it is the same folder.
    private mutating func folderKey(of path: HashedPath) -> HashedPath {
        if !path.isInFolder(lastFolder) { lastFolder = path.folder }
        return lastFolder
    }

    func makeIterator() -> some IteratorProtocol<(path: String, state: FileState)> {
        shards.lazy.flatMap { $0.entries.lazy.filter(\.isHeld) }.map { (path: $0.path.path, state: $0.state) }.makeIterator()
    }
}
