/// A `subscribe` request's members, typed as the wire carries them (`PROTOCOL.md`, `subscribe`).
///
/// Decoding checks only what the wire promises — which members exist and the kind of each
/// value — so a misspelt `since_seq` is refused, not ignored. What the values mean (patterns
/// that parse, counts of at least one, limits on watches) is the host's to check: it knows its
/// rules and answers `bad_request` naming the member.
public struct SubscribeRequest: Equatable, Sendable {
    /// Event name patterns (empty, and no sources below: every event).
    public var patterns: [String] = []
    /// Field matches: each field's accepted values (strings, numbers or booleans; a string with
    /// `*` or `?` is a glob). A single value on the wire reads as a list of one.
    public var match: [String: [JSON]] = [:]
    /// Where the stream starts: a sequence number, a time (microseconds since the Unix epoch) or
    /// the last N matching events; at most one of the three.
    public var sinceSequence: Int64?
    public var sinceTime: Int64?
    public var last: Int64?
    /// The host life `sinceSequence` and `untilSequence` count in (``EventCursor``); nil: the
    /// host's own.
    public var life: String?
    /// Where it ends: after a sequence number or at a time.
    public var untilSequence: Int64?
    public var untilTime: Int64?
    /// False: what the host holds now and nothing after it (nil: the host's default, true).
    public var follow: Bool?
    /// End after this many events.
    public var count: Int64?
    /// The client's own sources: paths whose file changes to add (`recursive`: below them too),
    /// journal units, device subsystems (`*`: all), unit name patterns.
    public var files: [String] = []
    public var recursive = false
    public var journal: [String] = []
    public var devices: [String] = []
    public var units: [String] = []
    /// Sources of the other kinds, by kind: what `eventbus tail --<kind> VALUE` asks for
    /// (`{"dbus": ["interface=org.freedesktop.login1.Manager,member=PrepareForSleep"]}`), each
    /// value read by the host's kind.
    public var sources: [String: [String]] = [:]
    /// The client's buffer in events (the host caps it).
    public var buffer: Int64?
    /// Only events from these origin hosts (`local`: this host's own).
    public var hosts: [String] = []

    public init() {}

    private enum Member: String, CaseIterable {
        case patterns, match, follow, last, count, files, recursive, journal, devices, units, sources, buffer, hosts, life
        case sinceSequence = "since_seq", sinceTime = "since_time", untilSequence = "until_seq", untilTime = "until_time"
    }

    /// The members a client may give, sorted (for messages).
    private static let memberList = Member.allCases.map(\.rawValue).sorted().joined(separator: ", ")

    /// The request's members, without `op` and `id`; only those set.
    var members: [String: JSON] {
        var members: [String: JSON] = [:]
        func set(_ member: Member, _ value: JSON?) { if let value { members[member.rawValue] = value } }
        func set(_ member: Member, _ list: [String]) { if !list.isEmpty { members[member.rawValue] = .array(list.map(JSON.string)) } }
        set(.patterns, patterns)
        if !match.isEmpty { members[Member.match.rawValue] = .object(match.mapValues(JSON.array)) }
        set(.sinceSequence, sinceSequence.map(JSON.int))
        set(.sinceTime, sinceTime.map(JSON.int))
        set(.life, life.map(JSON.string))
        set(.last, last.map(JSON.int))
        set(.untilSequence, untilSequence.map(JSON.int))
        set(.untilTime, untilTime.map(JSON.int))
        set(.follow, follow.map(JSON.bool))
        set(.count, count.map(JSON.int))
        set(.files, files)
        if recursive { members[Member.recursive.rawValue] = .bool(true) }
        set(.journal, journal)
        set(.devices, devices)
        set(.units, units)
        if !sources.isEmpty { members[Member.sources.rawValue] = .object(sources.mapValues { .array($0.map(JSON.string)) }) }
        set(.buffer, buffer.map(JSON.int))
        set(.hosts, hosts)
        return members
    }

    /// Reads the members of a request line (`op` and `id` included).
    init(_ members: [String: JSON]) throws(ControlError) {
        for name in members.keys.sorted() where name != "op" && name != "id" && Member(rawValue: name) == nil {
            throw .badRequest("subscribe has no member \"\(name)\"; it takes \(Self.memberList)")
        }
        func strings(_ member: Member) throws(ControlError) -> [String] {
            switch members[member.rawValue] {
            case nil: return []
            case .string(let text)?: return [text]  // a single string counts as a list of one
            case .array(let items)?:
                var strings: [String] = []
                for item in items {
                    guard let text = item.stringValue else { throw .badRequest("\"\(member.rawValue)\" must be a list of strings, found \(item.kindName) in it") }
                    strings.append(text)
                }
                return strings
            case let other?: throw .badRequest("\"\(member.rawValue)\" must be a list of strings, found \(other.kindName)")
            }
        }
        func flag(_ member: Member) throws(ControlError) -> Bool? {
            guard let value = members[member.rawValue] else { return nil }
            guard let flag = value.boolValue else { throw .badRequest("\"\(member.rawValue)\" must be true or false, found \(value.kindName)") }
            return flag
        }
        func integer(_ member: Member) throws(ControlError) -> Int64? {
            guard let value = members[member.rawValue] else { return nil }
            guard let number = value.intValue else { throw .badRequest("\"\(member.rawValue)\" must be an integer, found \(value.kindName)") }
            return number
        }
        files = try strings(.files)
        journal = try strings(.journal)
        hosts = try strings(.hosts)
        devices = try strings(.devices)
        recursive = try flag(.recursive) ?? false
        units = try strings(.units)
        if let value = members[Member.sources.rawValue] {
            guard case .object(let kinds) = value else { throw .badRequest("\"sources\" must be an object of kind: [values], found \(value.kindName)") }
            for (kind, values) in kinds {
                let list: [JSON]
                switch values {
                case .string: list = [values]
                case .array(let items): list = items
                default: throw .badRequest("\"sources\": \"\(kind)\" must be a list of strings, found \(values.kindName)")
                }
                sources[kind] = try list.map { (item) throws(ControlError) -> String in
                    guard let text = item.stringValue else { throw .badRequest("\"sources\": \"\(kind)\" must be a list of strings, found \(item.kindName) in it") }
                    return text
                }
            }
        }
        patterns = try strings(.patterns)
        sinceSequence = try integer(.sinceSequence)
        if let value = members[Member.life.rawValue] {
            guard let text = value.stringValue else { throw .badRequest("\"life\" must be a string, found \(value.kindName)") }
            life = text
        }
        last = try integer(.last)
        count = try integer(.count)
        buffer = try integer(.buffer)
        sinceTime = try integer(.sinceTime)
        untilTime = try integer(.untilTime)
        untilSequence = try integer(.untilSequence)
        if let value = members[Member.match.rawValue] {
            guard case .object(let fields) = value else { throw .badRequest("\"match\" must be an object of field: value(s), found \(value.kindName)") }
            match = fields.mapValues { accepted in
                if case .array(let list) = accepted { return list }
                return [accepted]
            }
        }
        follow = try flag(.follow)
    }
}
