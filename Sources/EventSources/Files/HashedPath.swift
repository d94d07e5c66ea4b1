#if canImport(Glibc)
import Glibc
#endif

/// An absolute path with its hash, computed once.
///
/// Why: an event's path is looked up several times on its way (is it known, store it, index it in
/// its folder), and hashing a String costs ~500 instructions for a path of 50
/// bytes, as much as the lookup itself. So a path is hashed when it is made and carried with its
/// hash: into the snapshot and its folder index. A folder's key is
/// kept with its watch (see `FileWatchSource.directories`), so an event's folder costs no hash.
struct HashedPath: Hashable {
    let path: String
    let hash: Int

    init(_ path: String) {
        self.path = path
        hash = path.hashValue
    }

    /// `directory/name` (or `/name`), built in one allocation.
    init(_ directory: HashedPath, _ name: String) {
        var name = name
        self = name.withUTF8 { HashedPath(directory, UnsafeRawBufferPointer($0)) }
    }

    /// `directory/name` (or `/name`), built in one allocation from the name's bytes (invalid
    /// UTF-8 repaired, as `String(decoding:)` does).
    init(_ directory: HashedPath, _ name: UnsafeRawBufferPointer) {
        var directory = directory.path
        let separator = directory.utf8.count == 1 ? 0 : 1  // `/` + name, not `//` + name
        let joined = directory.withUTF8 { folder in
            String(unsafeUninitializedCapacity: folder.count + separator + name.count) { bytes in
                let base = UnsafeMutableRawBufferPointer(bytes)
                base.copyMemory(from: UnsafeRawBufferPointer(folder))
                if separator == 1 { base[folder.count] = UInt8(ascii: "/") }
                UnsafeMutableRawBufferPointer(rebasing: base[(folder.count + separator)...]).copyMemory(from: name)
                return bytes.count
            }
        }
        self.init(joined)
    }

    static func == (a: HashedPath, b: HashedPath) -> Bool { a.hash == b.hash && a.path == b.path }
    func hash(into hasher: inout Hasher) { hasher.combine(hash) }

    /// What `Set` and `Dictionary` hash a key with (with their per-table seed): the kept hash,
    /// mixed with the seed by a few multiplications and shifts (murmur3's finalizer) instead of a
    /// `Hasher` (SipHash-1-3 of one word, ~20 ns). Why it matters: a table that grows rehashes
    /// every key it holds, and a folder's entry set grows with the folder — 100k names in one
    /// folder were a multi-millisecond stall on the reader thread, during which events wait. The
    /// kept hash is already a keyed SipHash of the path; the mix spreads it and the seed over
    /// every bit, so tables of different sizes and seeds still see unrelated bucket orders.
    func _rawHashValue(seed: Int) -> Int {
        var x = UInt64(bitPattern: Int64(hash)) ^ UInt64(bitPattern: Int64(seed)) &* 0x9E37_79B9_7F4A_7C15
        x ^= x >> 33
        x &*= 0xFF51_AFD7_ED55_8CCD
        x ^= x >> 33
        x &*= 0xC4CE_B9FE_1A85_EC53
        x ^= x >> 33
        return Int(Int64(bitPattern: x))
    }

    /// The snapshot's shard for this path (see ``Snapshot``), from bits the dictionaries' own
    /// bucket index (the low bits of a hash of `hash`) does not depend on in any simple way.
    var shard: Int { Int(UInt(bitPattern: hash) >> 58) }

    /// Whether `folder` is the path up to (not including) its last `/` — or `/` for `/x` —
    /// compared as bytes: `String`'s own comparisons go through Unicode and a generic UTF-8
    /// view cost ~4 000 instructions for a 40-byte folder (measured with callgrind).
    func isInFolder(_ folder: HashedPath) -> Bool {
        var path = self.path, folder = folder.path
        return path.withUTF8 { bytes in
            folder.withUTF8 { folderBytes in
                let end = Self.folderEnd(bytes)
                return end == folderBytes.count && memcmp(bytes.baseAddress!, folderBytes.baseAddress!, end) == 0
            }
        }
    }

    /// The folder of this path (`/` for `/x`).
    var folder: HashedPath {
        var path = self.path
        let end = path.withUTF8 { Self.folderEnd($0) }
        return HashedPath(String(Substring(path.utf8.prefix(end))))
    }

    /// How many bytes of `bytes` (an absolute path) make its folder.
    private static func folderEnd(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        let slash = bytes.lastIndex(of: UInt8(ascii: "/")) ?? 0
        return max(slash, 1)
    }
}
