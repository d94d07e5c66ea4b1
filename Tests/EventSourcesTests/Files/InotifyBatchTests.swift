@testable import EventSources
import Testing
#if canImport(Glibc)
import Glibc
#endif

// Parsing what read(2) returns from an inotify descriptor into a batch whose names share one
// byte array (the kernel-facing behaviour is covered by FileSourceTests).
@Suite struct InotifyBatchTests {
    /// `struct inotify_event` followed by `name`, NUL-padded to `length` bytes.
    private static func record(wd: Int32, mask: UInt32, cookie: UInt32 = 0, name: String = "", length: Int = 0) -> [UInt8] {
        var bytes: [UInt8] = []
        withUnsafeBytes(of: wd) { bytes += $0 }
        withUnsafeBytes(of: mask) { bytes += $0 }
        withUnsafeBytes(of: cookie) { bytes += $0 }
        withUnsafeBytes(of: UInt32(length)) { bytes += $0 }
        return bytes + Array(name.utf8) + [UInt8](repeating: 0, count: length - name.utf8.count)
    }

    private static func names(_ batch: InotifyBatch) -> [String] {
        batch.events.map { event in batch.withName(of: event) { String(decoding: $0, as: UTF8.self) } }
    }

    @Test func eventsAndNamesAreParsedAcrossReads() {
        var batch = InotifyBatch()
        let first = Self.record(wd: 1, mask: InotifyMask.create, name: "a.txt", length: 16)
            + Self.record(wd: 2, mask: InotifyMask.deleteSelf)
            + Self.record(wd: 3, mask: InotifyMask.movedFrom, cookie: 7, name: "0123456789abcdef", length: 32)
        first.withUnsafeBytes { batch.append(parsing: $0, count: $0.count) }
        // A later read (looking for a move's partner) appends to the same batch.
        let second = Self.record(wd: 4, mask: InotifyMask.movedTo, cookie: 7, name: "é", length: 16)
        second.withUnsafeBytes { batch.append(parsing: $0, count: $0.count) }

        #expect(batch.count == 4)
        #expect(batch.events.map(\.wd) == [1, 2, 3, 4])
        #expect(batch[1].has(InotifyMask.deleteSelf))
        #expect(batch[2].cookie == 7 && batch[3].cookie == 7)
        #expect(Self.names(batch) == ["a.txt", "", "0123456789abcdef", "é"])
        batch.withNames(of: batch[2], batch[3]) { from, to in
            #expect(from.map { String(decoding: $0, as: UTF8.self) } == "0123456789abcdef")
            #expect(to.map { String(decoding: $0, as: UTF8.self) } == "é")
        }
        batch.withNames(of: nil, batch[0]) { from, to in #expect(from == nil && to?.count == 5) }

        batch.markHandled(3)
        #expect(batch[3].mask == 0)

        batch.removeAll(keepingCapacity: true)
        #expect(batch.count == 0)
        second.withUnsafeBytes { batch.append(parsing: $0, count: $0.count) }
        #expect(Self.names(batch) == ["é"])
    }

    @Test func aTruncatedRecordIsNotRead() {
        var batch = InotifyBatch()
        let bytes = Self.record(wd: 1, mask: InotifyMask.create, name: "x", length: 16)
        bytes.withUnsafeBytes { batch.append(parsing: $0, count: 10) }  // less than a header
        #expect(batch.count == 0)
    }
}
