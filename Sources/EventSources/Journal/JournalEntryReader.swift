import CSystemd
import EventBusKit
import Foundation

/// Copies the current entry of a handle into a ``JournalEntryBatch``.
///
/// The hot path of the journal source (its reader thread sets the ingest rate): one pass over
/// the entry's data with `sd_journal_enumerate_available_data` (rather than one
/// `sd_journal_get_data` per field, each of which walks the entry's items again), recognising the
/// standard fields by their first bytes, and copying out only those plus what ``JournalFields``
/// asks for.
///
/// Threads: the reader's thread only (it uses the handle).
struct JournalEntryReader {
    private let all: Bool
    /// The extra field names asked for, as bytes: compared without making a String per field.
    private let extra: [[UInt8]]

    init(fields: JournalFields) {
        all = fields.all
        extra = fields.extra.map { Array($0.utf8) }
    }

    private static let message: StaticString = "MESSAGE="
    private static let priority: StaticString = "PRIORITY="
    private static let unit: StaticString = "_SYSTEMD_UNIT="
    private static let identifier: StaticString = "SYSLOG_IDENTIFIER="
    private static let pid: StaticString = "_PID="

    /// Whether `NAME=value` data starts with `prefix` (a name and its `=`). Inline byte compares:
    /// a libc call per field and candidate cost more than the compare.
    @inline(__always)
    private static func data(_ data: UnsafeRawPointer, _ length: Int, startsWith prefix: StaticString) -> Bool {
        let count = prefix.utf8CodeUnitCount
        guard length >= count else { return false }
        let bytes = prefix.utf8Start
        for index in 0..<count where data.load(fromByteOffset: index, as: UInt8.self) != bytes[index] { return false }
        return true
    }

    /// Which standard field `NAME=value` data is — its bit and its name's length — decided mostly
    /// by the first byte or two, without looking for the `=` (most fields are not standard).
    @inline(__always)
    private static func standardField(_ data: UnsafeRawPointer, _ length: Int) -> (bit: UInt8, prefix: Int)? {
        guard length >= 5 else { return nil }
        func check(_ bit: UInt8, _ prefix: StaticString) -> (bit: UInt8, prefix: Int)? {
            Self.data(data, length, startsWith: prefix) ? (bit, prefix.utf8CodeUnitCount) : nil
        }
        switch data.load(as: UInt8.self) {
        case UInt8(ascii: "M"): return check(StandardBit.message, message)
        case UInt8(ascii: "P"): return check(StandardBit.priority, priority)
        case UInt8(ascii: "S"): return check(StandardBit.identifier, identifier)
        case UInt8(ascii: "_"):
            switch data.load(fromByteOffset: 1, as: UInt8.self) {
            case UInt8(ascii: "P"): return check(StandardBit.pid, pid)
            case UInt8(ascii: "S"): return check(StandardBit.unit, unit)
            default: return nil
            }
        default: return nil
        }
    }

    private enum StandardBit {
        static let pid: UInt8 = 1, message: UInt8 = 2, priority: UInt8 = 4, unit: UInt8 = 8, identifier: UInt8 = 16
        static let all: UInt8 = 0b11111
    }

    private func wants(_ name: UnsafeRawBufferPointer) -> Bool {
        all || extra.contains { $0.count == name.count && $0.withUnsafeBytes { memcmp($0.baseAddress!, name.baseAddress!, name.count) == 0 } }
    }

    /// Appends the current entry to `batch`; false if libsystemd cannot give its position (a
    /// corrupt entry: skipped, as journalctl skips it).
    func read(_ journal: SDJournal, into batch: inout JournalEntryBatch) -> Bool {
        let handle = journal.handle
        var realtime: UInt64 = 0
        var monotonic: UInt64 = 0
        var boot = sd_id128_t()
        var rawCursor: UnsafeMutablePointer<CChar>?
        guard sd_journal_get_realtime_usec(handle, &realtime) >= 0,
              sd_journal_get_monotonic_usec(handle, &monotonic, &boot) >= 0,
              sd_journal_get_cursor(handle, &rawCursor) >= 0, let rawCursor
        else { return false }
        let cursor = batch.store(UnsafeRawBufferPointer(start: rawCursor, count: strlen(rawCursor)))
        free(rawCursor)

        var entry = JournalEntryBatch.Entry(realtime: realtime, monotonic: monotonic, boot: boot, cursor: cursor,
                                            extra: batch.extraCount..<batch.extraCount)
        let wantsExtra = all || !extra.isEmpty
        var data: UnsafeRawPointer?
        var length = 0
        var found: UInt8 = 0  // a StandardBit per standard field seen
        sd_journal_restart_data(handle)
        // Without extra fields, stop as soon as the five standard ones are in: the rest of the
        // entry is never read.
        while (wantsExtra || found != StandardBit.all)
                && sd_journal_enumerate_available_data(handle, &data, &length) > 0 {
            guard let data else { continue }
            if let (bit, prefix) = Self.standardField(data, length), found & bit == 0 {
                found |= bit
                let value = UnsafeRawBufferPointer(start: data + prefix, count: length - prefix)
                switch bit {
                case StandardBit.pid: entry.pid = Self.integer(value).flatMap { Int32(exactly: $0) }
                case StandardBit.message: entry.message = batch.store(value)
                case StandardBit.priority: entry.priority = Self.integer(value).flatMap { JournalPriority(rawValue: Int($0)) }
                case StandardBit.unit: entry.unit = batch.store(value)
                default: entry.identifier = batch.store(value)
                }
            }
            if wantsExtra, let equals = memchr(data, Int32(UInt8(ascii: "=")), length) {
                let nameLength = UnsafeRawPointer(equals) - data
                let name = UnsafeRawBufferPointer(start: data, count: nameLength)
                if wants(name) {
                    batch.appendExtra(name: name, value: UnsafeRawBufferPointer(start: data + nameLength + 1,
                                                                                count: length - nameLength - 1))
                }
            }
        }
        entry.extra = entry.extra.lowerBound..<batch.extraCount
        batch.append(entry)
        return true
    }

    /// A small non-negative decimal, as journald writes `PRIORITY` and `_PID`.
    private static func integer(_ bytes: UnsafeRawBufferPointer) -> Int64? {
        guard !bytes.isEmpty, bytes.count <= 18 else { return nil }
        var value: Int64 = 0
        for byte in bytes {
            guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
            value = value * 10 + Int64(byte - UInt8(ascii: "0"))
        }
        return value
    }
}
