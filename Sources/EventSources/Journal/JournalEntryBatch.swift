import CSystemd
import EventBusKit
import Foundation

/// Entries read from the journal but not yet turned into events: what a journal source's reader
/// thread hands to its posting stage (``JournalPostingStage``).
///
/// Why raw bytes: the reader thread caps the ingest rate, so it does only what needs the
/// sd_journal handle — step, enumerate, take the cursor — and copies each wanted field's bytes
/// into one growing buffer. Making Strings (an allocation and a UTF-8 check each), the field
/// dictionary and the event happens on the posting stage, in parallel (``JournalEventDecoder``).
///
/// A value type, so filling it costs no dynamic exclusivity checks (a class's stored arrays paid
/// them on every append: measured, 5% of the reader's time). Handing it over moves its storage:
/// the reader takes a fresh batch at once, so the posting stage holds the only reference.
///
/// Threads: filled on the reader thread, then handed over whole to the posting stage.
struct JournalEntryBatch: Sendable {
    struct Entry {
        var realtime: UInt64
        var monotonic: UInt64
        var boot: sd_id128_t
        var cursor: Range<Int>
        var message: Range<Int>?
        var unit: Range<Int>?
        var identifier: Range<Int>?
        var priority: JournalPriority?
        var pid: Int32?
        /// The entry's fields beyond the standard ones, as a range of ``extraFields``.
        var extra: Range<Int>
    }

    /// Handed over when it holds this many entries or bytes, or when the reader reaches the end
    /// of the journal (so following adds no latency).
    static let entryLimit = 512
    static let byteLimit = 1 << 19

    private(set) var bytes: [UInt8] = []
    private(set) var entries: [Entry] = []
    private(set) var extraFields: [(name: Range<Int>, value: Range<Int>)] = []

    /// Empties the batch for reuse, keeping its storage: batches go round between the reader and
    /// the posting stage rather than being allocated for each hand-over.
    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        entries.removeAll(keepingCapacity: true)
        extraFields.removeAll(keepingCapacity: true)
    }

    var isEmpty: Bool { entries.isEmpty }
    var isFull: Bool { entries.count >= Self.entryLimit || bytes.count >= Self.byteLimit }

    /// Copies `buffer` in; returns where it is in ``bytes``.
    @inline(__always)
    mutating func store(_ buffer: UnsafeRawBufferPointer) -> Range<Int> {
        let start = bytes.count
        bytes.append(contentsOf: buffer)
        return start..<bytes.count
    }

    mutating func append(_ entry: Entry) { entries.append(entry) }

    mutating func appendExtra(name: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer) {
        extraFields.append((store(name), store(value)))
    }

    var extraCount: Int { extraFields.count }

    /// The bytes at `range` as a String (bytes that are not UTF-8 are replaced).
    func string(_ range: Range<Int>) -> String {
        bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[range]), as: UTF8.self) }
    }

    /// The cursor of the last entry.
    var lastCursor: String? { entries.last.map { string($0.cursor) } }
}

/// Turns a batch's entries into `journal.entry` events.
///
/// Threads: the posting stage's queue only.
struct JournalEventDecoder {
    private let source: String
    private let currentBoot: sd_id128_t
    /// The last boot id seen and its text: entries come in runs of one boot.
    private var lastBoot = (id: sd_id128_t(), text: "")

    init(source: String) {
        self.source = source
        var boot = sd_id128_t()
        if sd_id128_get_boot(&boot) < 0 { boot = sd_id128_t() }
        currentBoot = boot
    }

    mutating func event(_ entry: JournalEntryBatch.Entry, in batch: JournalEntryBatch) -> Event {
        var extra: [String: String] = [:]
        for index in entry.extra {
            let field = batch.extraFields[index]
            let name = batch.string(field.name)
            if extra[name] == nil { extra[name] = batch.string(field.value) }
        }
        return JournalEntry.event(
            message: entry.message.map(batch.string) ?? "", priority: entry.priority,
            unit: entry.unit.map(batch.string), identifier: entry.identifier.map(batch.string), pid: entry.pid,
            bootID: bootText(entry.boot), realtimeMicroseconds: entry.realtime,
            monotonicMicroseconds: entry.monotonic, cursor: batch.string(entry.cursor), fields: extra,
            source: source, currentBoot: sd_id128_equal(entry.boot, currentBoot) != 0)
    }

    private mutating func bootText(_ boot: sd_id128_t) -> String {
        if sd_id128_equal(boot, lastBoot.id) == 0 || lastBoot.text.isEmpty {
            var buffer = [CChar](repeating: 0, count: Int(SD_ID128_STRING_MAX))
            lastBoot = (boot, String(cString: sd_id128_to_string(boot, &buffer)))
        }
        return lastBoot.text
    }
}
