import Foundation

/// A `dbus.signal` event: one signal a D-Bus watch matched, its header and its arguments as
/// typed fields.
///
/// ## Fields
/// - `sender` (the sender's unique name, `:1.42`), `path`, `interface`, `member`, and
///   `signature` (the arguments' D-Bus signature, `sa{sv}as`).
/// - The arguments, `arg0`, `arg1`…, flattened by these rules:
///   - Basic types keep their natural field type: `y n q i u x` are ints, `t` is an int up to
///     `Int64.max` and decimal text beyond it, `d` a double, `b` a bool; `s`, object paths `o`
///     and signatures `g` are strings.
///   - An array is `argN.count` (its length) and its elements `argN.0`, `argN.1`…; a byte
///     array `ay` is one string, `argN` in lowercase hex, with `argN.count` bytes.
///   - A dictionary `a{…}` is `argN.<key>` per entry, the key as text (an int's digits, a
///     bool's `true`/`false`); no count, since a key could be named `count`. An empty
///     dictionary has no field: `signature` still shows it.
///   - A struct `(…)` is `argN.0`, `argN.1`… per member.
///   - A variant is unwrapped: its value's fields stand where the variant is, with no type
///     field (an `a{sv}`'s own keys are often named `type`). The field's type tells the kind;
///     the exact D-Bus type (`u` or `i`) is not kept.
///   - Nesting joins the names with dots: `arg1.Addresses.0.1`.
/// - `unrepresented`, only when something could not be: what and why, `; `-separated —
///   `arg2 (unix fd)`, `arg0.256… (744 more elements past 256)`, `arg1.a.b.c.d.e.f.g.h (nested
///   deeper than 8)`, `arg3… (past 1024 fields)`, `arg0.x (a second field of this name)`.
///   Nothing is dropped without being named here.
public struct DBusSignal: Sendable, Hashable {
    public static let eventName = "dbus.signal"

    /// Containers nested below an argument (arrays, dictionaries, structs; not variants) that
    /// are flattened; deeper ones are named in ``unrepresented``.
    public static let maxDepth = 8
    /// Elements flattened per array or dictionary (bytes of an `ay`: 4096); the rest are
    /// counted and named in ``unrepresented``.
    public static let maxElements = 256
    public static let maxBytes = 4096
    /// Argument fields per signal, all arguments together.
    public static let maxFields = 1024

    /// The sender's unique name (`:1.42`); empty on a peer-to-peer connection.
    public var sender: String
    public var path: String
    public var interface: String
    public var member: String
    public var signature: String
    /// The argument fields (`arg0`, `arg1.count`, `arg1.0`…) by the rules above.
    public var arguments: [String: FieldValue]
    /// What could not be represented, in argument order; empty when everything was.
    public var unrepresented: [String]

    public init(sender: String, path: String, interface: String, member: String, signature: String,
                arguments: [String: FieldValue] = [:], unrepresented: [String] = []) {
        self.sender = sender
        self.path = path
        self.interface = interface
        self.member = member
        self.signature = signature
        self.arguments = arguments
        self.unrepresented = unrepresented
    }

    public func event(source: String, monotonicNanoseconds: UInt64 = MonotonicClock.now()) -> Event {
        var fields = arguments
        fields["sender"] = .string(sender)
        fields["path"] = .string(path)
        fields["interface"] = .string(interface)
        fields["member"] = .string(member)
        fields["signature"] = .string(signature)
        if !unrepresented.isEmpty { fields["unrepresented"] = .string(unrepresented.joined(separator: "; ")) }
        return Event(name: Self.eventName, source: source, fields: fields, monotonicNanoseconds: monotonicNanoseconds)
    }

    /// Whether `key` names an argument field (`arg` and a digit).
    static func isArgumentField(_ key: String) -> Bool {
        key.hasPrefix("arg") && key.dropFirst(3).first.map { $0.isASCII && $0.isNumber } == true
    }
}

extension Event {
    /// The D-Bus signal this event carries, if it is a `dbus.signal` event.
    public var dbusSignal: DBusSignal? {
        guard name == DBusSignal.eventName, let sender = fields["sender"]?.stringValue, let path = fields["path"]?.stringValue,
              let interface = fields["interface"]?.stringValue, let member = fields["member"]?.stringValue,
              let signature = fields["signature"]?.stringValue else { return nil }
        return DBusSignal(sender: sender, path: path, interface: interface, member: member, signature: signature,
                          arguments: fields.filter { DBusSignal.isArgumentField($0.key) },
                          unrepresented: fields["unrepresented"]?.stringValue.map { $0.components(separatedBy: "; ") } ?? [])
    }
}
