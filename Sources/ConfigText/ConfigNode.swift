import EventBusKit
import Yams

/// A YAML node together with where it came from: the file, its line, and the dotted key path
/// that leads to it. Every accessor that can fail throws a ``ConfigError`` naming all three, so
/// no decoding code has to thread locations through by hand.
///
/// Why Yams' `Node` and not `Codable`: a decoding error from `YAMLDecoder` carries a coding path
/// but no line; composing nodes keeps `Mark`s, so each error points at the line to fix.
public struct ConfigNode {
    public let node: Node
    public let file: String
    public let key: String

    public var line: Int? { node.mark?.line }
    /// The line of the key this node is the value of (`limits:` rather than the first line of
    /// the table under it), when it came from a mapping.
    public var keyLine: Int? = nil

    public init(node: Node, file: String, key: String, keyLine: Int? = nil) {
        self.node = node
        self.file = file
        self.key = key
        self.keyLine = keyLine
    }

    public func error(_ message: String) -> ConfigError {
        ConfigError(file: file, line: line, key: key, message: message)
    }

    private func child(_ node: Node, key childKey: String, keyLine: Int? = nil) -> ConfigNode {
        ConfigNode(node: node, file: file, key: key.isEmpty ? childKey : key + "." + childKey, keyLine: keyLine)
    }

    /// The line of every key and list item under this node, by path relative to it
    /// (`limits.burst`, `targets[1]`): where a module's declaration finds a problem.
    public func keyLines() -> [String: Int] {
        var lines: [String: Int] = [:]
        func walk(_ node: Node, _ path: String) {
            switch node {
            case .mapping(let mapping):
                for (keyNode, valueNode) in mapping {
                    guard case .scalar(let scalar) = keyNode else { continue }
                    let childPath = path.isEmpty ? scalar.string : path + "." + scalar.string
                    lines[childPath] = keyNode.mark?.line
                    walk(valueNode, childPath)
                }
            case .sequence(let sequence):
                for (index, item) in sequence.enumerated() {
                    let childPath = "\(path)[\(index)]"
                    lines[childPath] = item.mark?.line
                    walk(item, childPath)
                }
            case .scalar, .alias:
                break
            }
        }
        walk(node, "")
        return lines
    }

    /// What a node is, for "expected …, found …" messages.
    private var found: String {
        switch node {
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        case .alias: return "an alias"
        case .scalar(let scalar):
            switch node.tagName {
            case .null: return "nothing (null)"
            case .str: return "the string \"\(scalar.string)\""
            default: return scalar.string
            }
        }
    }

    /// The entries of a mapping, in file order, with string keys. `allowed`, when given, lists
    /// the keys that may appear; any other key is an error (a typo must not be ignored silently).
    public func mapping(allowed: [String]? = nil) throws(ConfigError) -> [(key: String, value: ConfigNode)] {
        guard case .mapping(let mapping) = node else { throw error("expected a mapping, found \(found)") }
        var entries: [(key: String, value: ConfigNode)] = []
        for (keyNode, valueNode) in mapping {
            guard case .scalar(let scalar) = keyNode, keyNode.tagName != .null else {
                throw ConfigNode(node: keyNode, file: file, key: key).error("keys must be plain names")
            }
            let name = scalar.string
            let value = child(valueNode, key: name, keyLine: keyNode.mark?.line)
            if let allowed, !allowed.contains(name) { throw value.unknownKey(name, allowed: allowed) }
            entries.append((name, value))
        }
        return entries
    }

    /// The error for this node, under `name`, which is none of `allowed`, with the likely one named.
    public func unknownKey(_ name: String, allowed: [String]) -> ConfigError {
        let close = ModuleConfigKeys.likelyMeant(name, among: allowed)
        let hint = close.isEmpty ? "" : " (did you mean \(close.joined(separator: " or "))?)"
        return error("unknown key\(hint); expected one of: \(allowed.joined(separator: ", "))")
    }

    /// A mapping's entries by key (for lookups), after checking keys against `allowed`.
    public func fields(allowed: [String]) throws(ConfigError) -> [String: ConfigNode] {
        Dictionary(uniqueKeysWithValues: try mapping(allowed: allowed).map { ($0.key, $0.value) })
    }

    /// The items of a list; an item's key is `key[index]`.
    public func sequence() throws(ConfigError) -> [ConfigNode] {
        guard case .sequence(let sequence) = node else { throw error("expected a list, found \(found)") }
        return sequence.enumerated().map { index, item in
            ConfigNode(node: item, file: file, key: "\(key)[\(index)]")
        }
    }

    public func string() throws(ConfigError) -> String {
        guard case .scalar(let scalar) = node, node.tagName == .str else {
            throw error("expected a string, found \(found)")
        }
        return scalar.string
    }

    public func bool() throws(ConfigError) -> Bool {
        guard node.tagName == .bool, let value = node.bool else { throw error("expected true or false, found \(found)") }
        return value
    }

    public func int(atLeast minimum: Int) throws(ConfigError) -> Int {
        guard node.tagName == .int, let value = node.int else { throw error("expected an integer, found \(found)") }
        guard value >= minimum else { throw error("must be at least \(minimum), found \(value)") }
        return value
    }

    /// A duration such as `500ms`, `30s`, `5m`, `1.5h`; a plain number means seconds.
    public func duration() throws(ConfigError) -> Duration {
        guard case .scalar(let scalar) = node, node.tagName != .null else {
            throw error("expected a duration such as 30s or 500ms, found \(found)")
        }
        guard let duration = DurationText.parse(scalar.string) else {
            throw error("expected a duration such as 30s or 500ms, found \"\(scalar.string)\"")
        }
        return duration
    }

    /// A size in bytes (see ``ByteSizeText``): `64MiB`, `16 MB`, `512M` or a plain integer.
    public func byteSize(atLeast minimum: Int) throws(ConfigError) -> Int {
        guard case .scalar(let scalar) = node, node.tagName != .null else {
            throw error("expected a size such as 64MiB, 16 MB or 1048576 (bytes), found \(found)")
        }
        guard let bytes = ByteSizeText.parse(scalar.string) else {
            throw error("expected a size such as 64MiB, 16 MB or 1048576 (bytes), found \"\(scalar.string)\"")
        }
        guard bytes >= minimum else { throw error("must be at least \(ByteSizeText.describe(minimum)), found \(scalar.string)") }
        return bytes
    }

    /// The node as a module config value: scalars by their YAML type, lists and mappings nested.
    /// `budget` bounds what it may grow to: a few lines of YAML aliases can stand for billions of
    /// values (the "billion laughs"), which the host must refuse rather than build.
    public func configValue(within budget: inout ConfigExpansionBudget) throws(ConfigError) -> ConfigValue {
        switch node {
        case .scalar(let scalar):
            try budget.take(bytes: scalar.string.utf8.count)
            switch node.tagName {
            case .int:
                guard let value = node.int else { throw error("integer out of range: \(scalar.string)") }
                return .int(value)
            case .float:
                guard let value = node.float else { throw error("not a number: \(scalar.string)") }
                return .double(value)
            case .bool:
                guard let value = node.bool else { throw error("not true or false: \(scalar.string)") }
                return .bool(value)
            case .null:
                throw error("has no value (null); give it one or remove the key")
            default:
                // Strings, and scalars YAML would read as dates or binary: modules get the text.
                return .string(scalar.string)
            }
        case .sequence:
            try budget.take(bytes: 0)
            var items: [ConfigValue] = []
            for item in try sequence() { items.append(try item.configValue(within: &budget)) }
            return .array(items)
        case .mapping:
            try budget.take(bytes: 0)
            var table: [String: ConfigValue] = [:]
            for (name, value) in try mapping() {
                try budget.take(bytes: name.utf8.count)
                table[name] = try value.configValue(within: &budget)
            }
            return .table(table)
        case .alias:
            throw error("YAML aliases are not supported here; write the value out")
        }
    }
}

/// How large one module's config may be once YAML aliases are expanded — far above any real
/// config (a module's config travels to its worker in one message), far below what would
/// exhaust the host.
public struct ConfigExpansionBudget {
    public static let maximumValues = 100_000
    public static let maximumBytes = 16 << 20

    /// The node the error names: the section being expanded.
    public let section: ConfigNode
    private var values = 0
    private var bytes = 0

    public init(section: ConfigNode) { self.section = section }

    /// Counts one more value of `bytes` bytes of text.
    public mutating func take(bytes more: Int) throws(ConfigError) {
        values += 1
        bytes += more
        guard values <= Self.maximumValues, bytes <= Self.maximumBytes else {
            throw section.error("expands to more than \(Self.maximumValues) values or \(ByteSizeText.describe(Self.maximumBytes)) of text (YAML aliases are expanded); a module's config must stay within that")
        }
    }
}

extension Node {
    /// The node's resolved YAML type (`str`, `int`, `bool`…).
    fileprivate var tagName: Tag.Name { Tag.Name(rawValue: tag.rawValue) }
}
