/// A line the host writes, typed: the greeting, an answer to a request, or a line of a stream.
/// ``decode(_:)`` is the clients' one reader of them; the host writes each with the type's
/// ``json`` — through `Codable` for the cold-path answers (``CodableAnswer``), by hand for the
/// lines of a stream (the writers of ``EventLine``, ``GapLine`` and ``PostedBatch``, which skip
/// the tree). `PROTOCOL.md` describes every member.
///
/// Clients ignore members they do not know, so a newer host may add some.
public enum ControlResponse: Equatable {
    case hello(Hello)
    case error(ControlError)
    case posted(Posted)
    /// The answer to a batch `post`: a number or a refusal per item.
    case postedBatch(PostedBatch.Answer)
    case subscribed(Subscribed)
    case event(JSON)
    case gap(GapLine)
    case end(reason: String)
    case status(StatusReport)
    case modules([ModuleReport])
    case rules([RuleReport])
    case stats(StatsReport)
    case listing(Listing)
    case metrics(text: String)
    case reloaded(message: String)
    /// A `type` this client does not know (from a newer host).
    case other(type: String, JSON)

    /// Reads a parsed line by its `type`.
    public static func decode(_ line: JSON) throws(ResponseDecodingError) -> ControlResponse {
        guard let type = line["type"]?.stringValue else {
            throw ResponseDecodingError(description: "a line from eventbusd needs a \"type\"")
        }
        let members = try Members(line, type: type)
        switch type {
        case "hello": return .hello(try Hello(members))
        case "error":
            return .error(ControlError(ControlError.Code(rawValue: members["code"]?.stringValue ?? "unknown"),
                                       members["message"]?.stringValue ?? "unknown error"))
        case "posted":
            if members["seqs"] != nil { return .postedBatch(try PostedBatch.Answer(members)) }
            return .posted(Posted(name: try members.string("name"), sequence: UInt64(clamping: try members.int("seq"))))
        case "subscribed": return .subscribed(try Subscribed(members))
        case "event": return .event(line)
        case "gap": return .gap(try GapLine(members))
        case "end": return .end(reason: try members.string("reason"))
        case StatusReport.type: return .status(try StatusReport.decode(line))
        case ModulesAnswer.type: return .modules(try ModulesAnswer.decode(line).modules)
        case RulesAnswer.type: return .rules(try RulesAnswer.decode(line).rules)
        case StatsReport.type: return .stats(try StatsReport.decode(line))
        case Listing.type: return .listing(try Listing.decode(line))
        case "metrics": return .metrics(text: try members.string("text"))
        case "reloaded": return .reloaded(message: try members.string("message"))
        default: return .other(type: type, line)
        }
    }
}

extension ControlError {
    /// The `error` line's members.
    public var json: JSON { ["type": "error", "code": .string(code.rawValue), "message": .string(message)] }
}

/// The greeting, the first line of every connection.
public struct Hello: Equatable, Sendable {
    /// What this client may ask: `tail`, `status`, `modules`, `stats`, `metrics`, `post`, `reload`.
    public var may: [String]
    public var protocolVersion: Int64
    public var processID: Int64
    /// The client's uid as the host saw it (`SO_PEERCRED`).
    public var userID: Int64
    /// The host's life (``EventCursor``): the sequence numbers of this connection count in it
    /// (nil from a host older than lives).
    public var life: String?

    public init(may: [String], protocolVersion: Int64 = Int64(ControlProtocol.version), processID: Int64, userID: Int64,
                life: String? = nil) {
        self.may = may
        self.protocolVersion = protocolVersion
        self.processID = processID
        self.userID = userID
        self.life = life
    }

    init(_ members: Members) throws(ResponseDecodingError) {
        may = (members["may"]?.arrayValue ?? []).compactMap(\.stringValue)
        protocolVersion = try members.int("protocol")
        processID = members["pid"]?.intValue ?? 0
        userID = members["uid"]?.intValue ?? 0
        life = members["life"]?.stringValue
    }

    public var json: JSON {
        var members: [String: JSON] = ["type": "hello", "server": "eventbusd", "may": .array(may.map(JSON.string)),
                                       "protocol": .int(protocolVersion), "pid": .int(processID), "uid": .int(userID)]
        if let life { members["life"] = .string(life) }
        return .object(members)
    }
}

/// The answer to a `post` of one event.
public struct Posted: Equatable, Sendable {
    public var name: String
    public var sequence: UInt64

    public init(name: String, sequence: UInt64) {
        self.name = name
        self.sequence = sequence
    }

    public var json: JSON { ["type": "posted", "name": .string(name), "seq": .int(Int64(bitPattern: sequence))] }
}

/// The end of a stream: `count` (its count was reached), `until` (its window passed),
/// `shutdown` (the host stops).
public enum StreamEnd {
    public static func json(reason: String) -> JSON { ["type": "end", "reason": .string(reason)] }
}

/// The answer to `modules`: every module, in config order.
public struct ModulesAnswer: CodableAnswer, Equatable {
    public static let type = "modules"
    public var modules: [ModuleReport]

    public init(modules: [ModuleReport]) {
        self.modules = modules
    }
}

/// The answer to `reload`.
public enum Reloaded {
    public static func json(message: String) -> JSON { ["type": "reloaded", "message": .string(message)] }
}

/// The answer to `metrics`: the host's Prometheus text in one string.
public enum MetricsAnswer {
    public static let contentType = "text/plain; version=0.0.4"
    public static func json(text: String) -> JSON {
        ["type": "metrics", "content_type": .string(contentType), "text": .string(text)]
    }
}
