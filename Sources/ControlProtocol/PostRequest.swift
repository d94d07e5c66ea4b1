/// A `post` request: one event (`name`, `fields`), or a batch of up to
/// ``ControlProtocol/maximumPostBatch`` in `events`, each item standing alone.
public enum PostRequest: Equatable, Sendable {
    case one(PostedEvent)
    /// Each item decoded on its own: a bad one is refused by its index and takes nothing else
    /// with it.
    case batch([Result<PostedEvent, ControlError>])

    /// Decodes the members of a `post`. The request fails whole only when it is not a batch at
    /// all (not a list, empty, too long, or mixed with `name`/`fields`), or when its one event
    /// is bad.
    static func decode(_ members: [String: JSON], validName: (String) -> ControlError?) -> Result<PostRequest, ControlError> {
        guard let events = members["events"] else {
            return PostedEvent.decode(members, validName: validName).map(PostRequest.one)
        }
        guard case .array(let items) = events else {
            return .failure(.badRequest("\"events\" must be a list of {\"name\", \"fields\"} objects, found \(events.kindName)"))
        }
        if let both = ["name", "fields"].first(where: { members[$0] != nil }) {
            return .failure(.badRequest("a post has \"events\" or \"\(both)\", not both"))
        }
        guard !items.isEmpty, items.count <= ControlProtocol.maximumPostBatch else {
            return .failure(.badRequest("\"events\" holds 1 to \(ControlProtocol.maximumPostBatch) events, found \(items.count); nothing was posted"))
        }
        return .success(.batch(items.map { item in
            guard case .object(let members) = item else {
                return .failure(.badRequest("an event is an object with \"name\" and \"fields\", found \(item.kindName)"))
            }
            if let unknown = PostedEvent.unknownMember(members, in: "an event") { return .failure(.badRequest(unknown)) }
            return PostedEvent.decode(members, validName: validName)
        }))
    }

    var members: [String: JSON] {
        switch self {
        case .one(let event): return event.members
        case .batch(let items):
            return ["events": .array(items.map { item in
                switch item {
                case .success(let event): return .object(event.members)
                case .failure: return .null  // not sent by a client: a decoded refusal
                }
            })]
        }
    }
}

/// One event of a `post`: its name and its fields, each a string, integer, double or boolean
/// (checked when decoded).
public struct PostedEvent: Equatable, Sendable {
    public var name: String
    public var fields: [String: JSON]

    public init(name: String, fields: [String: JSON] = [:]) {
        self.name = name
        self.fields = fields
    }

    public static func decode(_ members: [String: JSON], validName: (String) -> ControlError?) -> Result<PostedEvent, ControlError> {
        guard let name = members["name"]?.stringValue else {
            return .failure(.badRequest("post needs \"name\": the event's name"))
        }
        if let refusal = validName(name) { return .failure(refusal) }
        guard let given = members["fields"] else { return .success(PostedEvent(name: name)) }
        guard case .object(let fields) = given else {
            return .failure(.badRequest("\"fields\" must be an object, found \(given.kindName)"))
        }
        for (key, value) in fields {
            switch value {
            case .string, .int, .double, .bool: continue
            default:
                return .failure(.badRequest("field \"\(key)\": a value is a string, number or boolean, found \(value.kindName)"))
            }
        }
        return .success(PostedEvent(name: name, fields: fields))
    }

    var members: [String: JSON] { ["name": .string(name), "fields": .object(fields)] }

    /// Why `members` cannot be an event of a batch, before the host's checks (of the name's
    /// rules and the fields' values): a member other than `name` and `fields`, or no string
    /// `name`. `item` names what holds the event in the message (`a line`).
    public static func itemProblem(_ members: [String: JSON], in item: String) -> String? {
        if let unknown = unknownMember(members, in: item) { return unknown }
        guard members["name"]?.stringValue != nil else { return "\"name\" (a string) is missing" }
        return nil
    }

    static func unknownMember(_ members: [String: JSON], in item: String) -> String? {
        // Looked for (and sorted, for a stable message) only when there is one.
        guard members.count > (members["name"] == nil ? 0 : 1) + (members["fields"] == nil ? 0 : 1),
              let unknown = members.keys.sorted().first(where: { $0 != "name" && $0 != "fields" }) else { return nil }
        return "unknown member \"\(unknown)\": \(item) has \"name\" and \"fields\""
    }
}
