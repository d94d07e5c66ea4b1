/// Which journal entries a watch delivers, in the shape sd-journal filters them.
///
/// sd-journal filters with a disjunction of terms (`sd_journal_add_disjunction` separates them),
/// each term a set of `FIELD=value` matches (`sd_journal_add_match`) where values of one field
/// are alternatives and different fields must all hold. A `JournalMatch` is exactly that: a list
/// of ``Term``s, any of which may match. `&&` and `||` combine matches and keep that shape
/// (`&&` distributes over the terms), so what a subscriber writes is what the reader hands to
/// libsystemd, and every entry is filtered inside libsystemd, never in Swift.
///
/// ```swift
/// let sshErrors = JournalMatch.unit("ssh.service") && .priority(atMost: .err)
/// let either = JournalMatch.identifier("sudo") || .field("_COMM", "su")
/// ```
public struct JournalMatch: Sendable, Hashable, CustomStringConvertible {
    /// One conjunction: for every field, the entry's value must be one of the accepted values.
    public struct Term: Sendable, Hashable {
        /// Field name → accepted values. Never empty for a field that is present.
        public fileprivate(set) var fields: [String: Set<String>]

        /// The `FIELD=value` strings for `sd_journal_add_match`, in a stable order.
        public var matchStrings: [String] {
            fields.keys.sorted().flatMap { field in fields[field]!.sorted().map { "\(field)=\($0)" } }
        }
    }

    /// The alternatives; empty means every entry (the reader adds no match at all) unless
    /// ``matchesNothing``.
    public private(set) var terms: [Term]
    /// Set when `&&` asked one field for disjoint sets of values in every term: no entry can
    /// match, and ``Bus/journal(matching:from:start:consumer:fields:)`` refuses it.
    public private(set) var matchesNothing = false

    /// Every entry.
    public static let all = JournalMatch(terms: [])

    private init(terms: [Term], matchesNothing: Bool = false) {
        self.terms = terms
        self.matchesNothing = matchesNothing
    }

    /// Entries whose `field` is `value`. `field` must be a journal field name (upper-case
    /// letters, digits and `_`, not starting with a digit, at most 64 characters); the bus checks
    /// that when the watch is made.
    public static func field(_ field: String, _ value: String) -> JournalMatch {
        JournalMatch(terms: [Term(fields: [field: [value]])])
    }

    /// Entries logged by processes of the unit (their `_SYSTEMD_UNIT`, which journald sets from
    /// the sender's cgroup).
    public static func unit(_ name: String) -> JournalMatch {
        field("_SYSTEMD_UNIT", name)
    }

    /// Entries with a `SYSLOG_IDENTIFIER` of `identifier` (what `logger -t` and
    /// `journalctl -t` call the tag).
    public static func identifier(_ identifier: String) -> JournalMatch {
        field("SYSLOG_IDENTIFIER", identifier)
    }

    /// Entries at `priority` or more severe (`PRIORITY=0` … `PRIORITY=n`, alternatives of one field).
    public static func priority(atMost priority: JournalPriority) -> JournalMatch {
        JournalMatch(terms: [Term(fields: ["PRIORITY": Set((0...priority.rawValue).map { String($0) })])])
    }

    /// Entries matching both. Distributes over the terms of each side; a field both sides
    /// constrain accepts only the values both accept, and a term left with a field that accepts
    /// nothing is dropped (no entry can match it).
    public static func && (lhs: JournalMatch, rhs: JournalMatch) -> JournalMatch {
        if lhs.matchesNothing || rhs.matchesNothing { return JournalMatch(terms: [], matchesNothing: true) }
        if lhs.terms.isEmpty { return rhs }
        if rhs.terms.isEmpty { return lhs }
        var terms: [Term] = []
        for left in lhs.terms {
            for right in rhs.terms {
                var merged = left
                for (field, values) in right.fields {
                    merged.fields[field] = merged.fields[field].map { $0.intersection(values) } ?? values
                }
                if !merged.fields.values.contains(where: \.isEmpty), !terms.contains(merged) {
                    terms.append(merged)
                }
            }
        }
        return JournalMatch(terms: terms, matchesNothing: terms.isEmpty)
    }

    /// Entries matching either.
    public static func || (lhs: JournalMatch, rhs: JournalMatch) -> JournalMatch {
        if lhs.matchesNothing { return rhs }
        if rhs.matchesNothing { return lhs }
        if lhs.terms.isEmpty { return lhs }  // every entry
        if rhs.terms.isEmpty { return rhs }
        var result = lhs
        for term in rhs.terms where !result.terms.contains(term) { result.terms.append(term) }
        return result
    }

    /// A match rebuilt from its terms (each a field → accepted values map), exactly as
    /// ``terms`` lists them: how a module worker's watch reaches the host with the same
    /// description, so both share one reader.
    @_spi(EventBusHost) public init(terms: [[String: Set<String>]]) {
        self.init(terms: terms.map { Term(fields: $0) }, matchesNothing: false)
    }

    /// The first field name that is not a journal field name, if any.
    var invalidFieldName: String? {
        terms.lazy.flatMap(\.fields.keys).first { !Self.isValidFieldName($0) }
    }

    /// `journalctl`-like: `A=1 B=2 + C=3` (`+` separates alternatives); `*` for every entry.
    public var description: String {
        if matchesNothing { return "(nothing)" }
        if terms.isEmpty { return "*" }
        return terms.map { $0.matchStrings.joined(separator: " ") }.sorted().joined(separator: " + ")
    }

    static func isValidFieldName(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= 64, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[0])
        else { return false }
        return bytes.allSatisfy { byte in
            (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "_")
        }
    }
}

/// Syslog priorities as the journal's `PRIORITY` field holds them (lower is more severe).
public enum JournalPriority: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case emerg = 0, alert, crit, err, warning, notice, info, debug

    public var description: String {
        switch self {
        case .emerg: "emerg"
        case .alert: "alert"
        case .crit: "crit"
        case .err: "err"
        case .warning: "warning"
        case .notice: "notice"
        case .info: "info"
        case .debug: "debug"
        }
    }
}
