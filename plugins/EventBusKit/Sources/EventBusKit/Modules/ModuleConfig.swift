/// A module's config section: plain values, as the host parsed them from its config file, read
/// through the module's declaration (``EventBusModule/configKeys``) when it has one.
///
/// With a declaration, the typed accessors use the declared default for a key the section
/// leaves out (the one place defaults live; a `default:` passed to an accessor applies only when
/// the key has no declared default), and reading a key that is not declared throws — so the code
/// and the declaration cannot drift apart. Without one (``ModuleConfigKeys/undeclared``) they
/// read the values as they are. ``subscript(_:)`` and ``values`` are always the raw section.
public struct ModuleConfig: Sendable, Hashable {
    public var values: [String: ConfigValue]
    /// The declaration the accessors read through; the host attaches the module's own.
    public var keys: ModuleConfigKeys

    public init(_ values: [String: ConfigValue] = [:], keys: ModuleConfigKeys = .undeclared) {
        self.values = values
        self.keys = keys
    }

    public subscript(key: String) -> ConfigValue? { values[key] }

    /// A nested table (declared with ``ModuleConfigKey/table(_:_:required:help:)``), read through
    /// its own keys; an empty one when the section leaves it out.
    public func table(_ key: String) throws -> ModuleConfig {
        var nested = ModuleConfigKeys.undeclared
        if keys.isDeclared {
            guard let declared = keys[key] else { throw notDeclared(key) }
            guard case .table(let inner) = declared.type else {
                throw EventBusError(.invalidModuleConfig, "key \"\(key)\" is declared as \(declared.type.article), not a table")
            }
            nested = inner
        }
        guard let value = values[key] else { return ModuleConfig([:], keys: nested) }
        guard case .table(let table) = value else { throw wrongType(key, "a table", value) }
        return ModuleConfig(table, keys: nested)
    }

    /// The value the section gives, else the declared default; throws for an undeclared key
    /// when the module declares its keys.
    private func lookup(_ key: String) throws -> ConfigValue? {
        guard keys.isDeclared else { return values[key] }
        guard let declared = keys[key] else { throw notDeclared(key) }
        return values[key] ?? declared.defaultValue
    }

    /// A required string; throws a message naming the key when it is missing or not a string.
    public func string(_ key: String) throws -> String {
        guard let value = try lookup(key) else { throw missing(key, "a string") }
        guard case .string(let string) = value else { throw wrongType(key, "a string", value) }
        return string
    }

    public func string(_ key: String, default fallback: String) throws -> String {
        try lookup(key) == nil ? fallback : try string(key)
    }

    public func int(_ key: String, default fallback: Int? = nil) throws -> Int {
        guard let value = try lookup(key) else {
            if let fallback { return fallback }
            throw missing(key, "an integer")
        }
        guard case .int(let int) = value else { throw wrongType(key, "an integer", value) }
        return int
    }

    public func double(_ key: String, default fallback: Double? = nil) throws -> Double {
        guard let value = try lookup(key) else {
            if let fallback { return fallback }
            throw missing(key, "a number")
        }
        switch value {
        case .double(let double): return double
        case .int(let int): return Double(int)
        default: throw wrongType(key, "a number", value)
        }
    }

    public func bool(_ key: String, default fallback: Bool? = nil) throws -> Bool {
        guard let value = try lookup(key) else {
            if let fallback { return fallback }
            throw missing(key, "true or false")
        }
        guard case .bool(let bool) = value else { throw wrongType(key, "true or false", value) }
        return bool
    }

    public func strings(_ key: String, default fallback: [String]? = nil) throws -> [String] {
        guard let value = try lookup(key) else {
            if let fallback { return fallback }
            throw missing(key, "a list of strings")
        }
        guard case .array(let items) = value else { throw wrongType(key, "a list of strings", value) }
        return try items.map { item in
            guard case .string(let string) = item else { throw wrongType(key, "a list of strings", value) }
            return string
        }
    }

    private func notDeclared(_ key: String) -> EventBusError {
        EventBusError(.invalidModuleConfig, "key \"\(key)\" is read but not declared in the module's configKeys (it declares: \(keys.names.joined(separator: ", ")))")
    }

    private func missing(_ key: String, _ expected: String) -> EventBusError {
        EventBusError(.invalidModuleConfig, "key \"\(key)\" is required: \(expected)")
    }

    private func wrongType(_ key: String, _ expected: String, _ value: ConfigValue) -> EventBusError {
        EventBusError(.invalidModuleConfig, "key \"\(key)\" must be \(expected), not \(value)")
    }
}

public enum ConfigValue: Sendable, Hashable, CustomStringConvertible {
    case string(String)
    case int(Int)
    case double(Double)
    case bool(Bool)
    case array([ConfigValue])
    case table([String: ConfigValue])

    public var description: String {
        switch self {
        case .string(let v): return "\"\(v)\""
        case .int(let v): return String(v)
        case .double(let v): return String(v)
        case .bool(let v): return String(v)
        case .array(let v): return "[" + v.map(\.description).joined(separator: ", ") + "]"
        case .table(let v): return "{" + v.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "}"
        }
    }
}

/// Literals, as for ``FieldValue``: defaults of a `.list(…, default: ["a", 1])` and tests read
/// like the YAML they stand for.
extension ConfigValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}
