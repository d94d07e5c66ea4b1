/// A module's config section: plain values, as the host parsed them from its config file.
public struct ModuleConfig: Sendable, Hashable {
    public var values: [String: ConfigValue]

    public init(_ values: [String: ConfigValue] = [:]) {
        self.values = values
    }

    public subscript(key: String) -> ConfigValue? { values[key] }

    /// A required string; throws a message naming the key when it is missing or not a string.
    public func string(_ key: String) throws -> String {
        guard let value = values[key] else { throw missing(key, "a string") }
        guard case .string(let string) = value else { throw wrongType(key, "a string", value) }
        return string
    }

    public func string(_ key: String, default fallback: String) throws -> String {
        values[key] == nil ? fallback : try string(key)
    }

    public func int(_ key: String, default fallback: Int? = nil) throws -> Int {
        guard let value = values[key] else {
            if let fallback { return fallback }
            throw missing(key, "an integer")
        }
        guard case .int(let int) = value else { throw wrongType(key, "an integer", value) }
        return int
    }

    public func double(_ key: String, default fallback: Double? = nil) throws -> Double {
        guard let value = values[key] else {
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
        guard let value = values[key] else {
            if let fallback { return fallback }
            throw missing(key, "true or false")
        }
        guard case .bool(let bool) = value else { throw wrongType(key, "true or false", value) }
        return bool
    }

    public func strings(_ key: String, default fallback: [String]? = nil) throws -> [String] {
        guard let value = values[key] else {
            if let fallback { return fallback }
            throw missing(key, "a list of strings")
        }
        guard case .array(let items) = value else { throw wrongType(key, "a list of strings", value) }
        return try items.map { item in
            guard case .string(let string) = item else { throw wrongType(key, "a list of strings", value) }
            return string
        }
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
