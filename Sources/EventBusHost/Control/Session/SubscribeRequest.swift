import ControlProtocol
import EventBusKit
import Foundation

/// A `subscribe` request, checked. Members it does not know are refused rather than ignored, so
/// a misspelt `since_seq` is an error, not a silent full stream.
struct SubscribeRequest {
    var patterns: [EventPattern] = []
    var since: UInt64?
    var last: Int?
    var count: Int?
    var files: [String] = []
    var recursive = false
    var journal: [String] = []
    /// Device subsystems whose `device.*` events to add (`*`: every subsystem).
    var devices: [String] = []
    /// Unit name patterns: one units watch of the system manager for them all.
    var units: [String] = []
    var buffer: Int?
    var filter = TailFilter()
    /// Whether the stream goes on live after the replay (`follow`, default true).
    var follow = true
    /// Only events whose origin host (``EventOrigin``) is one of these; `local`: this host's own.
    var hosts: [String] = []

    /// What one subscription may ask for. The fan-out matches every event against every
    /// pattern of every tailing client on the bus's delivery loop, each `files` path is a watch
    /// (recursive: one per directory, from the machine's shared `max_user_watches`), and each
    /// distinct `journal` request is a journal reader (a thread and an inotify instance, from the
    /// machine's 128): without bounds one request line (up to 1 MiB) could ask for ~100 000 of
    /// each and stall the bus or exhaust the machine's watches and instances. Field globs are
    /// matched there too, so their total length is bounded.
    enum Limits {
        static let patterns = 256
        static let files = 64
        static let journalUnits = 256
        static let deviceSubsystems = 64
        static let unitPatterns = 256
        static let matchFields = 64
        /// Values given for one field.
        static let matchValues = 256
        /// The characters of every glob of a subscription together: a glob costs up to its
        /// length per character of the value it is matched with.
        static let matchGlobCharacters = 1024
    }

    static let members: Set<String> = ["op", "id", "patterns", "since_seq", "since_time", "until_seq", "until_time",
                                       "match", "follow", "last", "count", "files", "recursive", "journal", "devices", "units", "buffer", "hosts"]

    init(_ request: [String: JSON], maximumBuffer: Int) throws(ControlError) {
        if let unknown = request.keys.sorted().first(where: { !Self.members.contains($0) }) {
            throw .badRequest("subscribe has no member \"\(unknown)\"; it takes \(Self.members.subtracting(["op", "id"]).sorted().joined(separator: ", "))")
        }
        files = try Self.strings(request["files"], "files")
        journal = try Self.strings(request["journal"], "journal")
        hosts = try Self.strings(request["hosts"], "hosts")
        devices = try Self.distinct(Self.strings(request["devices"], "devices"), "devices", limit: Limits.deviceSubsystems)
        if let value = request["recursive"] {
            guard let flag = value.boolValue else { throw .badRequest("\"recursive\" must be true or false, found \(value.kindName)") }
            recursive = flag
        }
        files = try Self.distinct(files, "files", limit: Limits.files)
        journal = try Self.distinct(journal, "journal", limit: Limits.journalUnits)
        units = try Self.distinct(Self.strings(request["units"], "units"), "units", limit: Limits.unitPatterns)
        do {
            if !units.isEmpty { try UnitWatch(match: UnitMatch(units)).validate() }
        } catch {
            throw .badRequest((error as? EventBusError)?.message ?? "\(error)")
        }
        for text in try Self.distinct(Self.strings(request["patterns"], "patterns"), "patterns", limit: Limits.patterns) {
            do {
                patterns.append(try EventPattern(text))
            } catch {
                throw ControlError(.invalidPattern, (error as? EventBusError)?.message ?? "\(error)")
            }
        }
        // No patterns and no sources: everything.
        if patterns.isEmpty && files.isEmpty && journal.isEmpty && devices.isEmpty && units.isEmpty { patterns = [EventPattern.all] }
        since = try Self.number(request["since_seq"], "since_seq", atLeast: 0).map { UInt64(max(1, $0)) }  // sequences start at 1
        last = try Self.number(request["last"], "last", atLeast: 0)
        count = try Self.number(request["count"], "count", atLeast: 1)
        buffer = try Self.number(request["buffer"], "buffer", atLeast: 1).map { min($0, maximumBuffer) }
        filter.since = try Self.number(request["since_time"], "since_time", atLeast: 0).map(Self.date(microseconds:))
        filter.until = try Self.number(request["until_time"], "until_time", atLeast: 0).map(Self.date(microseconds:))
        filter.untilSequence = try Self.number(request["until_seq"], "until_seq", atLeast: 0).map { UInt64($0) }
        filter.matches = try Self.matches(request["match"])
        if let value = request["follow"] {
            guard let flag = value.boolValue else { throw .badRequest("\"follow\" must be true or false, found \(value.kindName)") }
            follow = flag
        }
        let starts = [since != nil, last != nil, filter.since != nil].filter { $0 }.count
        if starts > 1 { throw .badRequest("give one of since_seq, since_time and last") }
        if files.contains(where: \.isEmpty) { throw .badRequest("\"files\" holds an empty path") }
        if journal.contains(where: \.isEmpty) { throw .badRequest("\"journal\" holds an empty unit name") }
        if devices.contains("*") && devices.count > 1 { throw .badRequest("\"devices\" is \"*\" (every subsystem) or subsystem names, not both") }
        for subsystem in devices where subsystem != "*" {
            do {
                try DeviceWatch(subsystem: subsystem).validate()
            } catch {
                throw .badRequest((error as? EventBusError)?.message ?? "\(error)")
            }
        }
    }

    /// A list of strings; a single string counts as a list of one.
    private static func strings(_ value: JSON?, _ name: String) throws(ControlError) -> [String] {
        switch value {
        case nil: return []
        case .string(let text)?: return [text]
        case .array(let items)?:
            var strings: [String] = []
            for item in items {
                guard let text = item.stringValue else { throw .badRequest("\"\(name)\" must be a list of strings, found \(item.kindName) in it") }
                strings.append(text)
            }
            return strings
        case let other?: throw .badRequest("\"\(name)\" must be a list of strings, found \(other.kindName)")
        }
    }

    /// `items` without repeats (first occurrence kept), refused when more than `limit` remain.
    private static func distinct(_ items: [String], _ name: String, limit: Int) throws(ControlError) -> [String] {
        var seen = Set<String>()
        let unique = items.filter { seen.insert($0).inserted }
        guard unique.count <= limit else {
            throw .badRequest("\"\(name)\" holds \(unique.count) different entries; one subscription takes at most \(limit) (open another connection for more)")
        }
        return unique
    }

    /// `{"FIELD": "VALUE"}` or `{"FIELD": ["VALUE", …]}`; numbers and booleans count as their
    /// text, a string with `*` or `?` is a glob.
    private static func matches(_ value: JSON?) throws(ControlError) -> [String: FieldMatch] {
        guard let value else { return [:] }
        guard case .object(let members) = value else { throw .badRequest("\"match\" must be an object of field: value(s), found \(value.kindName)") }
        guard members.count <= Limits.matchFields else {
            throw .badRequest("\"match\" holds \(members.count) fields; one subscription takes at most \(Limits.matchFields)")
        }
        var matches: [String: FieldMatch] = [:]
        for (field, accepted) in members {
            guard !field.isEmpty else { throw .badRequest("\"match\" holds an empty field name") }
            let items: [JSON]
            if case .array(let list) = accepted { items = list } else { items = [accepted] }
            guard !items.isEmpty else { throw .badRequest("\"match\": field \"\(field)\" has no values") }
            guard items.count <= Limits.matchValues else {
                throw .badRequest("\"match\": field \"\(field)\" has \(items.count) values; one field takes at most \(Limits.matchValues)")
            }
            for item in items {
                switch item {
                case .string(let text): matches[field, default: FieldMatch()].add(text)
                case .int(let number): matches[field, default: FieldMatch()].add(String(number))
                case .double(let number): matches[field, default: FieldMatch()].add(String(number))
                case .bool(let flag): matches[field, default: FieldMatch()].add(String(flag))
                default: throw .badRequest("\"match\": field \"\(field)\" takes strings, numbers or booleans, found \(item.kindName)")
                }
            }
        }
        let globCharacters = matches.values.reduce(0) { $0 + $1.globs.reduce(0) { $0 + $1.length } }
        guard globCharacters <= Limits.matchGlobCharacters else {
            throw .badRequest("\"match\": its globs hold \(globCharacters) characters together; one subscription takes at most \(Limits.matchGlobCharacters)")
        }
        return matches
    }

    /// Times on the wire are microseconds since the Unix epoch, like the journal's realtime.
    private static func date(microseconds: Int) -> Date {
        Date(timeIntervalSince1970: Double(microseconds) / 1_000_000)
    }

    private static func number(_ value: JSON?, _ name: String, atLeast minimum: Int64) throws(ControlError) -> Int? {
        guard let value else { return nil }
        guard let number = value.intValue else { throw .badRequest("\"\(name)\" must be an integer, found \(value.kindName)") }
        guard number >= minimum else { throw .badRequest("\"\(name)\" must be at least \(minimum), found \(number)") }
        return Int(number)
    }
}
