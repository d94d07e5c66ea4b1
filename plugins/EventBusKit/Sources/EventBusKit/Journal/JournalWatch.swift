import Foundation

/// What a journal source follows: the options of the shared `journal` source kind.
///
/// Equal watches share one reader (one sd_journal handle, one inotify instance); the
/// ``description`` is part of the source id, so it is canonical (sorted, no defaults left out
/// that could make equal watches differ).
public struct JournalWatch: SourceOptions {
    public static let kind = "journal"

    /// Which entries (filtered inside libsystemd).
    public var match: JournalMatch
    /// Which journal files.
    public var location: JournalLocation
    /// Where delivery starts when there is no persisted position for ``consumer``.
    public var start: JournalStart
    /// A name under which the host persists the position of the last entry the subscriber
    /// acknowledged (``Bus/acknowledge(_:)``), so delivery resumes right after it when the
    /// watch starts again, in this process or after a restart. `nil`: no persisted position.
    /// Letters, digits, `.`, `_` and `-`, at most 128, not starting with `.`.
    public var consumer: String?
    /// Which fields each `journal.entry` event carries.
    public var fields: JournalFields

    public init(match: JournalMatch = .all, location: JournalLocation = .system, start: JournalStart = .tail,
                consumer: String? = nil, fields: JournalFields = .standard) {
        self.match = match
        self.location = location
        self.start = start
        self.consumer = consumer
        self.fields = fields
    }

    public var description: String {
        var parts = ["match=\(match)", "in=\(location)", "start=\(start)"]
        if let consumer { parts.append("consumer=\(consumer)") }
        parts.append("fields=\(fields)")
        return parts.joined(separator: " ")
    }

    /// Throws ``EventBusError/Code/invalidJournalWatch`` for what would fail only later, in the
    /// reader: a malformed field name, a match no entry can satisfy, a bad consumer name, a
    /// relative directory.
    public func validate() throws {
        if let field = match.invalidFieldName ?? fields.extra.first(where: { !JournalMatch.isValidFieldName($0) }) {
            throw EventBusError(.invalidJournalWatch,
                "\"\(field)\" is not a journal field name (A-Z, 0-9 and _, not starting with a digit, at most 64)")
        }
        if match.matchesNothing {
            throw EventBusError(.invalidJournalWatch,
                "the match can never hold: && asks one field for values that exclude each other")
        }
        if let consumer, !Self.isValidConsumerName(consumer) {
            throw EventBusError(.invalidJournalWatch,
                "consumer name \"\(consumer)\" must be letters, digits, '.', '_' or '-' (at most 128, not starting with '.')")
        }
        switch location {
        case .directory(let path) where !path.hasPrefix("/"):
            throw EventBusError(.invalidJournalWatch, "journal directory \"\(path)\" must be an absolute path")
        case .namespace(let name) where name.isEmpty || name.contains("/"):
            throw EventBusError(.invalidJournalWatch, "journal namespace \"\(name)\" is not a namespace name")
        default:
            break
        }
    }

    /// Consumer names become file names in the host's state directory.
    static func isValidConsumerName(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 128, !name.hasPrefix(".") else { return false }
        return name.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII && (CharacterSet.alphanumerics.contains(scalar) || "._-".unicodeScalars.contains(scalar))
        }
    }
}

/// Which journal files a watch reads.
public enum JournalLocation: Sendable, Hashable, CustomStringConvertible {
    /// The local system journal (`/run/log/journal`, `/var/log/journal`): system services and
    /// the kernel, as `journalctl --system` shows.
    case system
    /// The journal files in a directory (and its machine-id subdirectories), as
    /// `journalctl -D` reads them.
    case directory(String)
    /// A journald namespace (`systemd-journald@NAME`), as `journalctl --namespace` reads it.
    case namespace(String)

    public var description: String {
        switch self {
        case .system: "system"
        case .directory(let path): "dir:\(path)"
        case .namespace(let name): "namespace:\(name)"
        }
    }
}

/// Where delivery starts (when no persisted consumer position applies).
public enum JournalStart: Sendable, Hashable, CustomStringConvertible {
    /// Only entries written after the reader opened the journal (the `journal.status`
    /// `following` event marks that point).
    case tail
    /// From the oldest entry still in the journal.
    case head
    /// From the first entry at or after this wall-clock time.
    case since(Date)
    /// Right after the entry with this cursor (a `journal.gap` first if it is gone).
    case afterCursor(String)

    public var description: String {
        switch self {
        case .tail: "tail"
        case .head: "head"
        case .since(let date): "since:\(UInt64(max(0, date.timeIntervalSince1970 * 1e6)))us"
        case .afterCursor(let cursor): "after:\(cursor)"
        }
    }
}

/// Which fields a `journal.entry` event carries. The standard ones (message, priority, unit,
/// identifier, pid, boot id, times, cursor) always; others only on request, because the reader
/// copies every field it delivers out of the journal file: asking for all of them costs
/// several times the standard set on the hot path.
public struct JournalFields: Sendable, Hashable, CustomStringConvertible {
    /// Every field of each entry.
    public let all: Bool
    /// Field names (as the journal spells them, e.g. `_HOSTNAME`) delivered besides the
    /// standard ones.
    public let extra: Set<String>

    /// The standard fields only.
    public static let standard = JournalFields(all: false, extra: [])
    /// Every field of each entry (see ``JournalEntry/fields``).
    public static let everything = JournalFields(all: true, extra: [])
    /// The standard fields and these.
    public static func standard(plus names: Set<String>) -> JournalFields {
        JournalFields(all: false, extra: names)
    }

    public var description: String {
        all ? "all" : extra.isEmpty ? "standard" : "standard+" + extra.sorted().joined(separator: ",")
    }
}

extension Bus {
    /// `journal.entry` events for the entries `match` selects, with `journal.gap` and
    /// `journal.status` notices of the same watch. Subscriptions with equal options share one
    /// reader; it opens with the first subscriber and closes after the last cancels.
    ///
    /// Throws ``EventBusError/Code/invalidJournalWatch`` for malformed options and
    /// ``EventBusError/Code/sourceUnavailable`` on a bus without the host's journal driver.
    public func journal(matching match: JournalMatch = .all, from location: JournalLocation = .system,
                        start: JournalStart = .tail, consumer: String? = nil,
                        fields: JournalFields = .standard) throws -> EventPublisher {
        try journal(JournalWatch(match: match, location: location, start: start, consumer: consumer, fields: fields))
    }

    /// Like ``journal(matching:from:start:consumer:fields:)``, with the options as one value.
    public func journal(_ watch: JournalWatch) throws -> EventPublisher {
        try watch.validate()
        return try publisher(for: [try! EventPattern("journal.>")], from: watch)
    }
}
