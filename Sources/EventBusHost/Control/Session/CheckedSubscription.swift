import ControlProtocol
import EventBusKit
import EventSources
import Foundation

/// A `subscribe` request (``SubscribeRequest``, its members and their kinds already read),
/// checked against the host's rules: patterns that parse, bounds on what one subscription may
/// open and match, one start of the stream.
struct CheckedSubscription {
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
    /// Sources of the registry's other kinds (the `sources` member), as their options, and the
    /// values as asked, by kind (for the answer).
    var sources: [ConfiguredSource] = []
    var sourceValues: [String: [String]] = [:]
    var buffer: Int?
    var filter = TailFilter()
    /// Whether the stream goes on live after the replay (`follow`, default true).
    var follow = true
    /// Only events whose origin host (``EventOrigin``) is one of these; `local`: this host's own.
    var hosts: [String] = []
    /// `since_seq` counted in an earlier life than `life`: the stream starts at this life's
    /// first event instead (``Subscribed/sinceEarlierLife``).
    var sinceEarlierLife = false

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
        /// Values of one kind of the `sources` member.
        static let sourceValues = 64
        static let matchFields = 64
        /// Values given for one field.
        static let matchValues = 256
        /// The characters of every glob of a subscription together: a glob costs up to its
        /// length per character of the value it is matched with.
        static let matchGlobCharacters = 1024
    }

    /// `life`: the host's (``EventCursor``); a request's `since_seq` of another life starts at
    /// this life's first event, its `until_seq` of another life is refused — that window ended
    /// before this host started.
    init(_ request: SubscribeRequest, maximumBuffer: Int, life: String) throws(ControlError) {
        hosts = request.hosts
        devices = try Self.distinct(request.devices, "devices", limit: Limits.deviceSubsystems)
        recursive = request.recursive
        files = try Self.distinct(request.files, "files", limit: Limits.files)
        journal = try Self.distinct(request.journal, "journal", limit: Limits.journalUnits)
        units = try Self.distinct(request.units, "units", limit: Limits.unitPatterns)
        do {
            if !units.isEmpty { try UnitWatch(match: UnitMatch(units)).validate() }
        } catch {
            throw .badRequest((error as? EventBusError)?.message ?? "\(error)")
        }
        for (name, values) in request.sources.sorted(by: { $0.key < $1.key }) {
            guard let kind = SourceKinds.kind(named: name) else {
                throw .badRequest("\"sources\": this eventbusd has no source kind \"\(name)\"; it has \(SourceKinds.all.map { $0.name }.joined(separator: ", "))")
            }
            if case .member(let member) = kind.tailOption.wire {
                throw .badRequest("\"sources\": \(name) sources are asked for with the \"\(member)\" member")
            }
            let unique = try Self.distinct(values, "sources.\(name)", limit: Limits.sourceValues)
            for value in unique {
                do {
                    sources.append(ConfiguredSource(try kind.options(fromTail: value)))
                } catch {
                    throw .badRequest("\"sources\": \(name) \"\(value)\": \((error as? EventBusError)?.message ?? "\(error)")")
                }
            }
            sourceValues[name] = unique
        }
        for text in try Self.distinct(request.patterns, "patterns", limit: Limits.patterns) {
            do {
                patterns.append(try EventPattern(text))
            } catch {
                throw ControlError(.invalidPattern, (error as? EventBusError)?.message ?? "\(error)")
            }
        }
        // No patterns and no sources: everything.
        if patterns.isEmpty && files.isEmpty && journal.isEmpty && devices.isEmpty && units.isEmpty && sources.isEmpty {
            patterns = [EventPattern.all]
        }
        since = try Self.number(request.sinceSequence, "since_seq", atLeast: 0).map { UInt64(max(1, $0)) }  // sequences start at 1
        last = try Self.number(request.last, "last", atLeast: 0)
        count = try Self.number(request.count, "count", atLeast: 1)
        buffer = try Self.number(request.buffer, "buffer", atLeast: 1).map { min($0, maximumBuffer) }
        filter.since = try Self.number(request.sinceTime, "since_time", atLeast: 0).map(Self.date(microseconds:))
        filter.until = try Self.number(request.untilTime, "until_time", atLeast: 0).map(Self.date(microseconds:))
        filter.untilSequence = try Self.number(request.untilSequence, "until_seq", atLeast: 0).map { UInt64($0) }
        filter.matches = try Self.matches(request.match)
        follow = request.follow ?? true
        if let asked = request.life, asked != life {
            if since != nil {
                since = 1
                sinceEarlierLife = true
            }
            if filter.untilSequence != nil {
                throw .badRequest("until_seq counts in life \(asked), not in this eventbusd's life \(life): that window ended before this host started")
            }
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
    private static func matches(_ members: [String: [JSON]]) throws(ControlError) -> [String: FieldMatch] {
        guard members.count <= Limits.matchFields else {
            throw .badRequest("\"match\" holds \(members.count) fields; one subscription takes at most \(Limits.matchFields)")
        }
        var matches: [String: FieldMatch] = [:]
        for (field, items) in members {
            guard !field.isEmpty else { throw .badRequest("\"match\" holds an empty field name") }
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

    private static func number(_ number: Int64?, _ name: String, atLeast minimum: Int64) throws(ControlError) -> Int? {
        guard let number else { return nil }
        guard number >= minimum else { throw .badRequest("\"\(name)\" must be at least \(minimum), found \(number)") }
        return Int(number)
    }
}
