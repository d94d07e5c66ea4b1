import Foundation

/// A journal entry, as module code reads it from a `journal.entry` event.
public struct JournalEntry: Sendable, Hashable {
    public static let eventName = "journal.entry"

    /// `MESSAGE` (bytes that are not UTF-8 are replaced).
    public var message: String
    /// `PRIORITY`, when the entry has a valid one.
    public var priority: JournalPriority?
    /// `_SYSTEMD_UNIT`: the unit whose cgroup the sender was in.
    public var unit: String?
    /// `SYSLOG_IDENTIFIER`.
    public var identifier: String?
    /// `_PID` of the sender.
    public var pid: Int32?
    /// The boot the entry was written in (32 hex digits, as `_BOOT_ID`).
    public var bootID: String
    /// Wall-clock time of the entry, microseconds since 1970 (`__REALTIME_TIMESTAMP`).
    public var realtimeMicroseconds: UInt64
    /// `CLOCK_MONOTONIC` microseconds of the entry in its boot (`__MONOTONIC_TIMESTAMP`).
    public var monotonicMicroseconds: UInt64
    /// The entry's position: pass it to ``JournalStart/afterCursor(_:)`` to resume after it.
    public var cursor: String
    /// Fields asked for beyond the standard ones (``JournalFields``), by their journal names
    /// (`_HOSTNAME`, `CODE_FILE`…). A field that occurs several times in the entry keeps its
    /// first value; bytes that are not UTF-8 are replaced.
    public var fields: [String: String]

    /// The shared source that delivered the entry (the event's `source`): where an
    /// acknowledgement goes.
    public var source: String
    /// The entry's bus sequence number: orders acknowledgements of one watch.
    public var sequence: UInt64

    public var realtime: Date { Date(timeIntervalSince1970: Double(realtimeMicroseconds) / 1e6) }

    public init(message: String, priority: JournalPriority?, unit: String?, identifier: String?, pid: Int32?,
                bootID: String, realtimeMicroseconds: UInt64, monotonicMicroseconds: UInt64, cursor: String,
                fields: [String: String] = [:], source: String = "", sequence: UInt64 = 0) {
        self.message = message
        self.priority = priority
        self.unit = unit
        self.identifier = identifier
        self.pid = pid
        self.bootID = bootID
        self.realtimeMicroseconds = realtimeMicroseconds
        self.monotonicMicroseconds = monotonicMicroseconds
        self.cursor = cursor
        self.fields = fields
        self.source = source
        self.sequence = sequence
    }

    /// The `journal.entry` event for an entry's parts, posted by `source`. Its wall time is the
    /// entry's; its monotonic time is the entry's when `currentBoot` says it was written in this
    /// boot (so latency is comparable), else the time of this call.
    ///
    /// Takes the parts rather than a `JournalEntry`: this is the journal source's hot path, where
    /// building and destroying an intermediate value (a retain and a release per string) was a
    /// measurable share of each entry's cost.
    public static func event(message: String, priority: JournalPriority?, unit: String?, identifier: String?,
                             pid: Int32?, bootID: String, realtimeMicroseconds: UInt64,
                             monotonicMicroseconds: UInt64, cursor: String, fields: [String: String],
                             source: String, currentBoot: Bool) -> Event {
        let mask = (priority != nil ? 1 : 0) | (unit != nil ? 2 : 0) | (identifier != nil ? 4 : 0) | (pid != nil ? 8 : 0)
        let template = FieldTemplate.all[mask]
        var values = template.fields
        func set(_ key: FieldTemplate.Key, _ value: FieldValue) {
            values.values[template.slots[key.rawValue]!] = value
        }
        set(.message, .string(message))
        set(.bootID, .string(bootID))
        set(.realtime, .int(Int64(bitPattern: realtimeMicroseconds)))
        set(.monotonic, .int(Int64(bitPattern: monotonicMicroseconds)))
        set(.cursor, .string(cursor))
        if let priority { set(.priority, .int(Int64(priority.rawValue))) }
        if let unit { set(.unit, .string(unit)) }
        if let identifier { set(.identifier, .string(identifier)) }
        if let pid { set(.pid, .int(Int64(pid))) }
        // Standard keys are lower-case; journal field names are upper-case: they cannot collide.
        for (name, value) in fields { values[name] = .string(value) }
        return Event(name: eventName, source: source, fields: values,
                     wallTime: Date(timeIntervalSince1970: Double(realtimeMicroseconds) / 1e6),
                     monotonicNanoseconds: currentBoot ? monotonicMicroseconds &* 1000 : MonotonicClock.now())
    }

    /// Prebuilt field dictionaries, one per combination of optional standard fields present,
    /// with the index of each key.
    ///
    /// Why: building the fields of each entry by inserting keys hashes every key (SipHash) and
    /// grows the table — measured as a third of the journal source's time per entry. Copying
    /// a template copies its table without rehashing, and values written through
    /// `values[index]` change no key, so the template's indices stay valid in the copy.
    private struct FieldTemplate {
        enum Key: Int, CaseIterable {
            case message, bootID, realtime, monotonic, cursor, priority, unit, identifier, pid

            var name: String {
                switch self {
                case .message: "message"
                case .bootID: "boot_id"
                case .realtime: "realtime_us"
                case .monotonic: "monotonic_us"
                case .cursor: "cursor"
                case .priority: "priority"
                case .unit: "unit"
                case .identifier: "identifier"
                case .pid: "pid"
                }
            }
        }

        let fields: [String: FieldValue]
        let slots: [Dictionary<String, FieldValue>.Index?]

        /// Indexed by a mask of the optional fields present: priority 1, unit 2, identifier 4, pid 8.
        static let all: [FieldTemplate] = (0..<16).map { mask in
            let optional: [(Key, Int)] = [(.priority, 1), (.unit, 2), (.identifier, 4), (.pid, 8)]
            let keys: [Key] = [.message, .bootID, .realtime, .monotonic, .cursor]
                + optional.filter { mask & $0.1 != 0 }.map(\.0)
            var fields = [String: FieldValue](minimumCapacity: Key.allCases.count)
            for key in keys { fields[key.name] = .bool(false) }
            return FieldTemplate(fields: fields, slots: Key.allCases.map { fields.index(forKey: $0.name) })
        }
    }
}

extension Event {
    /// The journal entry this event carries, if it is one.
    public var journalEntry: JournalEntry? {
        guard name == JournalEntry.eventName,
              let message = fields["message"]?.stringValue,
              let bootID = fields["boot_id"]?.stringValue,
              let realtime = fields["realtime_us"]?.intValue,
              let monotonic = fields["monotonic_us"]?.intValue,
              let cursor = fields["cursor"]?.stringValue
        else { return nil }
        var extra: [String: String] = [:]
        for (key, value) in fields where key.utf8.first.map({ !(UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) }) ?? false {
            if let string = value.stringValue { extra[key] = string }
        }
        return JournalEntry(
            message: message,
            priority: fields["priority"]?.intValue.flatMap { JournalPriority(rawValue: Int($0)) },
            unit: fields["unit"]?.stringValue,
            identifier: fields["identifier"]?.stringValue,
            pid: fields["pid"]?.intValue.map { Int32(truncatingIfNeeded: $0) },
            bootID: bootID,
            realtimeMicroseconds: UInt64(bitPattern: realtime),
            monotonicMicroseconds: UInt64(bitPattern: monotonic),
            cursor: cursor,
            fields: extra,
            source: source,
            sequence: sequence)
    }
}
