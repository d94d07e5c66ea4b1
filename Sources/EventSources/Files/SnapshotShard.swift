/// One of the ``Snapshot``'s 64 parts: the entries whose path hashes to it, kept in the order
/// they came (a freed slot is reused), and an open-addressing index over them.
///
/// Why not a `Dictionary`: a dictionary's entries live in its buckets, so a new path is written
/// to a random place in a table of every path this part holds (72 bytes each) — a cache miss, and
/// a page touched for the first time, per created file; at 100k paths the snapshot's tables are
/// megabytes. Here a new entry goes after the last one (memory the last one warmed) and only its
/// 8-byte bucket lands at random, in an index a tenth the size of the entries. It holds 32 bits of
/// each path's hash, so a probe compares a path only when those agree, and grows without touching
/// the entries. Measured with callgrind's cache simulation over a 100k-file storm (files-reader,
/// see docs/benchmarks.md): 40 % fewer data cache misses per event than a `Dictionary` per shard
/// and a `Set` per folder, for the same instructions.
///
/// Entries are linked to their folder's other entries (``Entry/previous``, ``Entry/next``): the
/// snapshot's folder index is those links and a folder → first entry table, so indexing a path
/// costs two writes to entries already in the cache (the new one and the folder's last) instead
/// of an insert into a set per folder.
struct SnapshotShard {
    static let count = 64

    /// An entry in any shard: the shard in the top 6 bits, the slot below — 64 shards of 2^26
    /// entries (the last two of the last shard's stand for ``none`` and ``freed``): more paths
    /// than a machine holds the memory for.
    typealias Reference = UInt32
    /// No entry: the end of a folder's entries.
    static let none: Reference = .max
    /// `previous` of a freed slot.
    static let freed: Reference = .max - 1

    static func split(_ reference: Reference) -> (shard: Int, slot: Int) {
        (Int(reference >> 26), Int(reference & (1 << 26 - 1)))
    }

    struct Entry {
        var path: HashedPath
        var state: FileState
        /// The neighbours among the folder's entries (``SnapshotShard/none`` at either end). In a
        /// freed slot, `previous` is ``SnapshotShard/freed`` and `next` the next freed slot.
        var previous: Reference
        var next: Reference

        var isHeld: Bool { previous != SnapshotShard.freed }
    }

    /// An index bucket: the slot of an entry and 32 bits of its path's hash.
    private struct Bucket {
        static let empty = Bucket(slot: SnapshotShard.none, hash: 0)
        /// ``SnapshotShard/none`` when empty.
        var slot: UInt32
        var hash: UInt32
    }

    /// The entries, ``chunkSize`` to a chunk: a shard that grows adds a chunk instead of copying
    /// all it holds into an array twice the size (and faulting that in). Only the first chunk
    /// grows as an array does, so a shard of a small tree stays small.
    private var chunks: [[Entry]] = []
    private static let chunkShift = 10
    static let chunkSize = 1 << chunkShift
    /// Power-of-two sized, at most 3/4 full; linear probing.
    private var index: [Bucket] = []
    /// The first freed slot, ``SnapshotShard/none`` when there is none.
    private var freeSlots = SnapshotShard.none
    private var held = 0

    subscript(slot: Int) -> Entry {
        get { chunks[slot >> Self.chunkShift][slot & (Self.chunkSize - 1)] }
        _modify { yield &chunks[slot >> Self.chunkShift][slot & (Self.chunkSize - 1)] }
    }

    /// Every slot's entry, the freed ones included.
    var entries: some Sequence<Entry> { chunks.joined() }

    /// The slot of `path`, nil if this shard does not hold it.
    func slot(of path: HashedPath) -> Int? {
        guard !index.isEmpty else { return nil }
        let hash = Self.indexHash(path)
        let mask = index.count - 1
        var position = Int(hash) & mask
        return index.withUnsafeBufferPointer { index in
            while true {
                let bucket = index[position]
                if bucket.slot == SnapshotShard.none { return nil }
                if bucket.hash == hash && self[Int(bucket.slot)].path == path { return Int(bucket.slot) }
                position = (position + 1) & mask
            }
        }
    }

    /// Adds `path`, which this shard does not hold, at the head of a folder's entries whose first
    /// entry was `next`; returns the new entry's reference.
    mutating func insert(_ path: HashedPath, _ state: FileState, next: Reference) -> Reference {
        if (held + 1) * 4 > index.count * 3 { growIndex() }
        let entry = Entry(path: path, state: state, previous: SnapshotShard.none, next: next)
        let slot: UInt32
        if freeSlots != SnapshotShard.none {
            slot = freeSlots
            freeSlots = self[Int(slot)].next
            self[Int(slot)] = entry
        } else {
            if chunks.last.map({ $0.count == Self.chunkSize }) ?? true {
                var chunk: [Entry] = []
                if !chunks.isEmpty { chunk.reserveCapacity(Self.chunkSize) }
                chunks.append(chunk)
            }
            let last = chunks.count - 1
            slot = UInt32(last << Self.chunkShift + chunks[last].count)
            chunks[last].append(entry)
        }
        place(Bucket(slot: slot, hash: Self.indexHash(path)))
        held += 1
        return UInt32(path.shard) << 26 | slot
    }

    /// Frees `slot` (its entry must have been taken out of its folder's entries, or be dropped
    /// with the whole folder).
    mutating func remove(slot: Int) {
        let mask = index.count - 1
        var hole = Int(Self.indexHash(self[slot].path)) & mask
        while index[hole].slot != UInt32(slot) { hole = (hole + 1) & mask }
        // Backward shift, so that no probe ever needs a tombstone: each later bucket of the run
        // whose home is not between the hole and itself moves into the hole.
        var probe = hole
        while true {
            probe = (probe + 1) & mask
            let bucket = index[probe]
            if bucket.slot == SnapshotShard.none { break }
            let home = Int(bucket.hash) & mask
            if probe > hole ? (home <= hole || home > probe) : (home <= hole && home > probe) {
                index[hole] = bucket
                hole = probe
            }
        }
        index[hole] = .empty
        self[slot] = Entry(path: Self.vacant, state: .changed(isDirectory: false), previous: SnapshotShard.freed,
                           next: freeSlots)
        freeSlots = UInt32(slot)
        held -= 1
    }

    private mutating func growIndex() {
        let old = index
        index = Array(repeating: .empty, count: max(16, old.count * 2))
        for bucket in old where bucket.slot != SnapshotShard.none { place(bucket) }
    }

    private mutating func place(_ bucket: Bucket) {
        let mask = index.count - 1
        var position = Int(bucket.hash) & mask
        while index[position].slot != SnapshotShard.none { position = (position + 1) & mask }
        index[position] = bucket
    }

    /// What a freed slot holds instead of its path (which it releases).
    private static let vacant = HashedPath("/")

    /// The low 32 bits of the path's kept hash (a keyed SipHash, so every bit is as good as any;
    /// the shard is chosen by the top 6).
    private static func indexHash(_ path: HashedPath) -> UInt32 {
        UInt32(truncatingIfNeeded: path.hash)
    }
}
