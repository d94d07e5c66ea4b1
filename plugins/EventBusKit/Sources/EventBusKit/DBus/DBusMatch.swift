/// Which signals a D-Bus watch takes: a D-Bus match rule's keys, every one given having to hold.
///
/// ```swift
/// let sleep = DBusMatch(interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep")
/// let same = try DBusMatch(parsing: "interface=org.freedesktop.login1.Manager,member=PrepareForSleep")
/// sleep.rule  // type='signal',interface='org.freedesktop.login1.Manager',member='PrepareForSleep'
/// ```
///
/// A match without any key takes every signal the bus routes to the host (broadcasts, and
/// signals sent to it): on a busy system bus, thousands a second.
public struct DBusMatch: Sendable, Hashable, CustomStringConvertible {
    /// The sender's bus name: unique (`:1.42`) or well-known (`org.freedesktop.login1`), which
    /// the host follows to its current owner.
    public var sender: String?
    /// The object path, exactly (`/org/freedesktop/login1`).
    public var path: String?
    /// The object path or any path below it (`/org/freedesktop/login1/session`). Not with ``path``.
    public var pathNamespace: String?
    public var interface: String?
    public var member: String?
    /// `argN` keys: argument N (0…63) is a string equal to the value.
    public var arguments: [Int: String]

    public init(sender: String? = nil, path: String? = nil, pathNamespace: String? = nil,
                interface: String? = nil, member: String? = nil, arguments: [Int: String] = [:]) {
        self.sender = sender
        self.path = path
        self.pathNamespace = pathNamespace
        self.interface = interface
        self.member = member
        self.arguments = arguments
    }

    /// The highest `argN` D-Bus takes.
    public static let maxArgument = 63

    /// A match from its keys as config writes them (`interface: org.x.Y`, `arg0: eth0`): the
    /// rule's own names (`sender`, `path`, `path_namespace`, `interface`, `member`, `arg0`…
    /// `arg63`), plus `type: signal`. Throws ``EventBusError/Code/invalidDBusWatch`` for any
    /// other key and for values D-Bus would refuse, saying which.
    public init(pairs: [(key: String, value: String)]) throws {
        self.init()
        var seen: Set<String> = []
        for (key, value) in pairs {
            guard seen.insert(key).inserted else {
                throw EventBusError(.invalidDBusWatch, "\(key) is given twice in the D-Bus match")
            }
            switch key {
            case "type":
                guard value == "signal" else {
                    throw EventBusError(.invalidDBusWatch, "type='\(value)': a D-Bus watch takes signals only (type='signal', or no type)")
                }
            case "sender": sender = value
            case "path": path = value
            case "path_namespace": pathNamespace = value
            case "interface": interface = value
            case "member": member = value
            default:
                guard let number = Self.argumentNumber(key) else {
                    throw EventBusError(.invalidDBusWatch,
                        "unknown key \"\(key)\" in the D-Bus match (keys: sender, path, path_namespace, interface, member, arg0…arg\(Self.maxArgument))")
                }
                arguments[number] = value
            }
        }
        try validate()
    }

    /// A match from the text of a D-Bus match rule: `interface=a.b,member=C,arg0=x`, values bare
    /// or quoted as in a rule (`arg0='a,b'`; ``rule`` and ``text`` read back). Keys and errors as
    /// ``init(pairs:)``.
    public init(parsing text: String) throws {
        try self.init(pairs: DBusMatchRuleSyntax.pairs(of: text))
    }

    /// The match rule for the bus's `AddMatch`, values quoted so dbus-daemon reads back
    /// exactly these strings: always `type='signal'`, then the keys in a fixed order.
    public var rule: String {
        (["type='signal'"] + keyValues.map { "\($0.key)=\(DBusMatchRuleSyntax.quoted($0.value))" }).joined(separator: ",")
    }

    /// The keys as ``init(parsing:)`` takes them, in a fixed order, values quoted only where the
    /// syntax needs it: `interface=org.freedesktop.login1.Manager,member=PrepareForSleep`.
    /// Equal matches have equal texts (part of a watch's source id); empty for a match of everything.
    public var text: String {
        keyValues.map { "\($0.key)=\(DBusMatchRuleSyntax.written($0.value))" }.joined(separator: ",")
    }

    public var description: String { text }

    /// The keys given, in the order of ``rule``.
    public var keyValues: [(key: String, value: String)] {
        var pairs: [(key: String, value: String)] = []
        if let sender { pairs.append(("sender", sender)) }
        if let path { pairs.append(("path", path)) }
        if let pathNamespace { pairs.append(("path_namespace", pathNamespace)) }
        if let interface { pairs.append(("interface", interface)) }
        if let member { pairs.append(("member", member)) }
        for number in arguments.keys.sorted() { pairs.append(("arg\(number)", arguments[number]!)) }
        return pairs
    }

    /// Throws ``EventBusError/Code/invalidDBusWatch`` for what the bus would refuse or what
    /// no signal can carry: names and paths D-Bus does not allow, both a path and a path
    /// namespace, an argument beyond arg63, a NUL in a value.
    public func validate() throws {
        func refuse(_ key: String, _ value: String, _ problem: String) -> EventBusError {
            EventBusError(.invalidDBusWatch, "\(key) \(DBusMatchRuleSyntax.quoted(value)) \(problem)")
        }
        if let sender, let problem = DBusNames.busNameProblem(sender) { throw refuse("sender", sender, problem) }
        if let path, let problem = DBusNames.objectPathProblem(path) { throw refuse("path", path, problem) }
        if let pathNamespace, let problem = DBusNames.objectPathProblem(pathNamespace) {
            throw refuse("path_namespace", pathNamespace, problem)
        }
        if path != nil && pathNamespace != nil {
            throw EventBusError(.invalidDBusWatch, "a D-Bus match takes path or path_namespace, not both (the bus refuses the rule)")
        }
        if let interface, let problem = DBusNames.interfaceProblem(interface) { throw refuse("interface", interface, problem) }
        if let member, let problem = DBusNames.memberProblem(member) { throw refuse("member", member, problem) }
        for (number, value) in arguments {
            guard (0...Self.maxArgument).contains(number) else {
                throw EventBusError(.invalidDBusWatch, "arg\(number): D-Bus matches arguments arg0…arg\(Self.maxArgument)")
            }
            if value.utf8.contains(0) { throw refuse("arg\(number)", value, "has a NUL, which no D-Bus string can carry") }
        }
    }

    /// N of `argN` (no leading zero, 0…63), else nil.
    private static func argumentNumber(_ key: String) -> Int? {
        guard key.hasPrefix("arg") else { return nil }
        let digits = key.dropFirst(3)
        guard !digits.isEmpty, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber),
              digits == "0" || !digits.hasPrefix("0"), let number = Int(digits), number <= maxArgument else { return nil }
        return number
    }
}

extension DBusMatch: Codable {
    /// The keys as an object (`{"interface": "…", "arg0": "…"}`), read back through
    /// ``init(pairs:)`` — so a forwarded watch is validated again where it arrives.
    public init(from decoder: any Decoder) throws {
        let keys = try decoder.singleValueContainer().decode([String: String].self)
        try self.init(pairs: keys.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(Dictionary(uniqueKeysWithValues: keyValues.map { ($0.key, $0.value) }))
    }
}
