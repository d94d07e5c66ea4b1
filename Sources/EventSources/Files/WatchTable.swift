/// Kernel watch descriptor → `Value`: a dictionary whose keys are hashed without a `Hasher`.
///
/// Why: every event is looked up by its watch twice (who holds it, which directory it stands
/// for), and `Int32`'s own hashing is a SipHash of the key (~80 instructions per look-up,
/// callgrind, files-reader benchmark) — against nobody: descriptors are handed out by the
/// kernel, not chosen by whoever makes the files, so a few multiplications spread them enough.
struct WatchTable<Value> {
    private var table: [Key: Value] = [:]

    subscript(watch: Int32) -> Value? {
        get { table[Key(watch: watch)] }
        set { table[Key(watch: watch)] = newValue }
    }

    @discardableResult
    mutating func removeValue(forKey watch: Int32) -> Value? {
        table.removeValue(forKey: Key(watch: watch))
    }

    mutating func removeAll() {
        table.removeAll()
    }

    var count: Int { table.count }

    var keys: some Collection<Int32> { table.keys.lazy.map(\.watch) }

    private struct Key: Hashable {
        let watch: Int32

        /// The descriptor mixed with the table's seed (murmur3's finalizer), as
        /// `HashedPath._rawHashValue(seed:)` does.
        func _rawHashValue(seed: Int) -> Int {
            var x = UInt64(UInt32(bitPattern: watch)) ^ UInt64(bitPattern: Int64(seed)) &* 0x9E37_79B9_7F4A_7C15
            x ^= x >> 33
            x &*= 0xFF51_AFD7_ED55_8CCD
            x ^= x >> 33
            return Int(Int64(bitPattern: x))
        }
    }
}
