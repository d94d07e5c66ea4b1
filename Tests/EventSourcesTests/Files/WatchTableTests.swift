@testable import EventSources
import Testing

// The watch descriptor table, without the kernel: a dictionary keyed by descriptors hashed
// without a Hasher behaves as a dictionary.
@Suite struct WatchTableTests {
    @Test func holdsReplacesAndRemovesByDescriptor() {
        var table = WatchTable<String>()
        // Descriptors as the kernel hands them out (increasing), past a table's growth points.
        for watch in Int32(1)...5000 { table[watch] = "d\(watch)" }
        #expect(table.count == 5000)
        #expect(table[1] == "d1" && table[4096] == "d4096" && table[5001] == nil && table[-1] == nil)

        table[7] = "replaced"
        #expect(table[7] == "replaced" && table.count == 5000)
        #expect(table.removeValue(forKey: 7) == "replaced")
        #expect(table.removeValue(forKey: 7) == nil)
        table[8] = nil
        #expect(table.count == 4998)
        #expect(Set(table.keys) == Set(Int32(1)...5000).subtracting([7, 8]))

        table.removeAll()
        #expect(table.count == 0 && table[1] == nil)
    }
}
