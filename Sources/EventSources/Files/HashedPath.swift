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
///
/// The hash is built a component at a time: a path's is its folder's hash and its name's bytes,
/// hashed together (`/`'s is a constant). Why: an event's path is its watch's folder, hashed
/// already, and a name — so hashing it costs the name (~20 bytes) rather than the whole path, and
/// a folder's entries moved to another folder are hashed from their new folder the same way.
/// The hash is keyed (`Hasher`, seeded per process), so names chosen to collide cannot be
/// made without knowing the seed.
struct HashedPath: Hashable {
    let path: String
    let hash: Int

    /// `path` (absolute), hashed component by component: costs its depth.
    init(_ path: String) {
        var path = path
        var hash = Self.rootHash
        path.withUTF8 { bytes in
            var start = 1  // after the leading `/`
            while start < bytes.count {
                let end = bytes[start...].firstIndex(of: UInt8(ascii: "/")) ?? bytes.count
                if end > start {
                    hash = Self.hash(folder: hash, name: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[start..<end])))
                }
                start = end + 1
            }
        }
        self.path = path
        self.hash = hash
    }

    /// `directory/name` (or `/name`), built in one allocation.
    init(_ directory: HashedPath, _ name: String) {
        var name = name
        self = name.withUTF8 { HashedPath(directory, UnsafeRawBufferPointer($0)) }
    }

    /// `directory/name` (or `/name`), built in one allocation from the name's bytes (invalid
    /// UTF-8 repaired, as `String(decoding:)` does).
    init(_ directory: HashedPath, _ name: UnsafeRawBufferPointer) {
        var folder = directory.path
        let prefix = folder.utf8.count == 1 ? 1 : folder.utf8.count + 1  // `/` + name, not `//` + name
        var joined = folder.withUTF8 { folder in
            String(unsafeUninitializedCapacity: prefix + name.count) { bytes in
                let base = UnsafeMutableRawBufferPointer(bytes)
                base.copyMemory(from: UnsafeRawBufferPointer(folder))
                base[prefix - 1] = UInt8(ascii: "/")
                UnsafeMutableRawBufferPointer(rebasing: base[prefix...]).copyMemory(from: name)
                return bytes.count
            }
        }
        // The name as the string holds it (repaired, if it was not valid UTF-8), so that the same
        // path made from a String has the same hash.
        hash = joined.withUTF8 { bytes in
            Self.hash(folder: directory.hash, name: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[prefix...])))
        }
        path = joined
    }

    /// The hash of `/`: where every path's hash starts.
    private static let rootHash = 0

    /// The hash of the path `name` in the folder hashed `folder`.
    private static func hash(folder: Int, name: UnsafeRawBufferPointer) -> Int {
        var hasher = Hasher()
        hasher.combine(folder)
        hasher.combine(bytes: name)
        return hasher.finalize()
    }

    static func == (a: HashedPath, b: HashedPath) -> Bool { a.hash == b.hash && a.path == b.path }
    func hash(into hasher: inout Hasher) { hasher.combine(hash) }

    /// What `Set` and `Dictionary` hash a key with (with their per-table seed): the kept hash,
    /// mixed with the seed by a few multiplications and shifts (murmur3's finalizer) instead of a
    /// `Hasher` (SipHash-1-3 of one word, ~20 ns). Why it matters: a table that grows rehashes
    /// every key it holds, and a folder's entry set grows with the folder — 100k names in one
    /// folder were a multi-millisecond stall on the reader thread, during which events wait. The
    /// kept hash is already a keyed SipHash (of the path's folder and name, chained); the mix
    /// spreads it and the seed over every bit, so tables of different sizes and seeds still see
    /// unrelated bucket orders.
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

    /// The path of the same name in `folder`: where this one goes when its folder moves there.
    /// Hashes the name only.
    func named(in folder: HashedPath) -> HashedPath {
        var path = self.path
        return path.withUTF8 { bytes in
            let name = (bytes.lastIndex(of: UInt8(ascii: "/")) ?? -1) + 1
            return HashedPath(folder, UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[name...])))
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
