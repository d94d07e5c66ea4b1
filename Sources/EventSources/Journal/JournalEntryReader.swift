import CSystemd
import EventBusKit
import Foundation

/// Turns the current entry of a handle into a `journal.entry` event.
///
/// The hot path of the journal source: one pass over the entry's data with
/// `sd_journal_enumerate_available_data` (rather than one `sd_journal_get_data` per field, each
/// of which walks the entry's items again), classifying field names by length and bytes, and
/// copying out only the standard fields plus what ``JournalFields`` asks for.
///
/// Threads: the reader's thread only (it uses the handle).
struct JournalEntryReader {
    private let fields: JournalFields
    private let currentBoot: sd_id128_t
    /// The last boot id seen and its text: entries come in runs of one boot.
    private var lastBoot = (id: sd_id128_t(), text: "")

    init(fields: JournalFields) {
        self.fields = fields
        var boot = sd_id128_t()
        if sd_id128_get_boot(&boot) < 0 { boot = sd_id128_t() }
        currentBoot = boot
    }

    private static let message: StaticString = "MESSAGE"
    private static let priority: StaticString = "PRIORITY"
    private static let unit: StaticString = "_SYSTEMD_UNIT"
    private static let identifier: StaticString = "SYSLOG_IDENTIFIER"
    private static let pid: StaticString = "_PID"

    @inline(__always)
    private static func name(_ start: UnsafeRawPointer, _ length: Int, is field: StaticString) -> Bool {
        length == field.utf8CodeUnitCount && memcmp(start, field.utf8Start, length) == 0
    }

    /// The current entry as an event posted by `source`, or nil if libsystemd cannot give its
    /// position (a corrupt entry: skipped, as journalctl skips it).
    mutating func event(from journal: SDJournal, source: String) -> Event? {
        let handle = journal.handle
        var realtime: UInt64 = 0
        var monotonic: UInt64 = 0
        var boot = sd_id128_t()
        guard sd_journal_get_realtime_usec(handle, &realtime) >= 0,
              sd_journal_get_monotonic_usec(handle, &monotonic, &boot) >= 0,
              let cursor = journal.cursor()
        else { return nil }

        var message: String?
        var priority: JournalPriority?
        var unit: String?
        var identifier: String?
        var pid: Int32?
        var extra: [String: String] = [:]
        let wantsExtra = fields.all || !fields.extra.isEmpty

        var data: UnsafeRawPointer?
        var length = 0
        var found: UInt8 = 0  // a bit per standard field seen
        sd_journal_restart_data(handle)
        // Without extra fields, stop as soon as the five standard ones are in: the rest of the
        // entry (often a dozen more fields from journald) is never read.
        while (wantsExtra || found != 0b11111) && sd_journal_enumerate_available_data(handle, &data, &length) > 0 {
            guard let data, let equals = memchr(data, Int32(UInt8(ascii: "=")), length) else { continue }
            let nameLength = UnsafeRawPointer(equals) - data
            let value = UnsafeRawBufferPointer(start: data + nameLength + 1, count: length - nameLength - 1)
            switch nameLength {
            case 4 where Self.name(data, 4, is: Self.pid):
                if found & 1 == 0 { pid = Self.integer(value).flatMap { Int32(exactly: $0) }; found |= 1 }
            case 7 where Self.name(data, 7, is: Self.message):
                if found & 2 == 0 { message = String(decoding: value, as: UTF8.self); found |= 2 }
            case 8 where Self.name(data, 8, is: Self.priority):
                if found & 4 == 0 { priority = Self.integer(value).flatMap { JournalPriority(rawValue: Int($0)) }; found |= 4 }
            case 13 where Self.name(data, 13, is: Self.unit):
                if found & 8 == 0 { unit = String(decoding: value, as: UTF8.self); found |= 8 }
            case 17 where Self.name(data, 17, is: Self.identifier):
                if found & 16 == 0 { identifier = String(decoding: value, as: UTF8.self); found |= 16 }
            default:
                break
            }
            if wantsExtra {
                let name = String(decoding: UnsafeRawBufferPointer(start: data, count: nameLength), as: UTF8.self)
                if (fields.all || fields.extra.contains(name)) && extra[name] == nil {
                    extra[name] = String(decoding: value, as: UTF8.self)
                }
            }
        }

        let entry = JournalEntry(
            message: message ?? "", priority: priority, unit: unit, identifier: identifier, pid: pid,
            bootID: bootText(boot), realtimeMicroseconds: realtime, monotonicMicroseconds: monotonic,
            cursor: cursor, fields: extra)
        return entry.event(source: source, currentBoot: sd_id128_equal(boot, currentBoot) != 0,
                           postedAt: MonotonicClock.now())
    }

    private mutating func bootText(_ boot: sd_id128_t) -> String {
        if sd_id128_equal(boot, lastBoot.id) == 0 || lastBoot.text.isEmpty {
            var buffer = [CChar](repeating: 0, count: Int(SD_ID128_STRING_MAX))
            lastBoot = (boot, String(cString: sd_id128_to_string(boot, &buffer)))
        }
        return lastBoot.text
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
