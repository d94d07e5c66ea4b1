/// The keys a module reads from its config section (`modules.NAME.config`), each with its type,
/// default and meaning. A module declares them once, next to its name:
///
/// ```swift
/// final class Hello: EventBusModule {
///     static let configKeys: ModuleConfigKeys = [
///         .string("greeting", default: "hello", help: "the word it greets with"),
///         .int("interval_seconds", default: 10, minimum: 1),
///         .strings("match", default: ["user.>"]),
///         .table("limits", [.int("burst", required: true)]),
///     ]
///     …
/// }
/// ```
///
/// Why: without it a typo (`greting:`) is silently ignored and the default used. With it the
/// host checks the section before it activates the module — in `eventbusd --check-config`, at
/// start and on every reload, in eventbusd or in the module's worker — and refuses a section
/// with an unknown key, a value of the wrong type or out of range, or a missing required key,
/// naming file, line and key and listing the keys the module reads. `context.config` reads
/// through the declaration: a key left out gets its declared default, and reading a key that is
/// not declared throws (the declaration and the code cannot drift apart unnoticed).
///
/// A module that declares nothing (``undeclared``, the default) gets its section unchecked, as
/// before; the host warns when such a module is given a section.
public struct ModuleConfigKeys: Sendable, Hashable, ExpressibleByArrayLiteral {
    /// In declaration order.
    public let keys: [ModuleConfigKey]
    /// False only for ``undeclared``.
    public let isDeclared: Bool

    public init(_ keys: [ModuleConfigKey]) {
        self.keys = keys
        self.isDeclared = true
    }

    public init(arrayLiteral keys: ModuleConfigKey...) {
        self.init(keys)
    }

    /// The module does not say what it reads: nothing is checked.
    public static let undeclared = ModuleConfigKeys(undeclared: ())

    private init(undeclared: Void) {
        keys = []
        isDeclared = false
    }

    public subscript(name: String) -> ModuleConfigKey? { keys.first { $0.name == name } }

    /// The keys' names, in declaration order.
    public var names: [String] { keys.map(\.name) }

    /// One line for people: `greeting (a string, default "hello": the word it greets with),
    /// interval_seconds (an integer ≥ 1, default 10)`; nested tables in braces.
    public var summary: String {
        guard isDeclared else { return "(not declared)" }
        guard !keys.isEmpty else { return "none (the module reads no keys)" }
        return keys.map(\.summary).joined(separator: ", ")
    }

    /// Everything wrong with `values` as a section these keys describe, in key order: unknown
    /// keys, missing required ones, values of the wrong type or out of range — and mistakes in
    /// the declaration itself. Empty when it is fine, or when nothing is declared.
    public func check(_ values: [String: ConfigValue]) -> [ModuleConfigProblem] {
        guard isDeclared else { return [] }
        return declarationProblems(at: []) + check(values, at: [])
    }

    fileprivate func check(_ values: [String: ConfigValue], at path: [String]) -> [ModuleConfigProblem] {
        var problems: [ModuleConfigProblem] = []
        for key in keys where key.isRequired && values[key.name] == nil {
            problems.append(ModuleConfigProblem(path: path, message: "the required key \"\(key.name)\" is missing (\(key.type.article))"))
        }
        for name in values.keys.sorted() {
            let value = values[name]!
            guard let key = self[name] else {
                let close = Self.likelyMeant(name, among: names)
                let hint = close.isEmpty ? "" : " (did you mean \(close.joined(separator: " or "))?)"
                let expected = keys.isEmpty ? "this section takes no keys" : "expected one of: \(names.joined(separator: ", "))"
                problems.append(ModuleConfigProblem(path: path + [name], message: "unknown key\(hint); \(expected)"))
                continue
            }
            problems += key.type.check(value, at: path + [name])
        }
        return problems
    }

    private func declarationProblems(at path: [String]) -> [ModuleConfigProblem] {
        var problems: [ModuleConfigProblem] = []
        var seen = Set<String>()
        for key in keys {
            let place = (path + [key.name]).joined(separator: ".")
            if !seen.insert(key.name).inserted {
                problems.append(ModuleConfigProblem(path: path, message: "the module declares the key \"\(place)\" twice (fix its configKeys)"))
            }
            if key.isRequired && key.defaultValue != nil {
                problems.append(ModuleConfigProblem(path: path, message: "the module declares \"\(place)\" both required and with a default (fix its configKeys)"))
            }
            if let value = key.defaultValue, !key.type.check(value, at: []).isEmpty {
                problems.append(ModuleConfigProblem(path: path, message: "the module's default for \"\(place)\", \(value), is not \(key.type.article) (fix its configKeys)"))
            }
            if case .table(let nested) = key.type { problems += nested.declarationProblems(at: path + [key.name]) }
        }
        return problems
    }

    /// The names `name` is a likely typo of, for "did you mean": within one edit per three
    /// characters (at least one). The host's own config keys get the same hints.
    public static func likelyMeant(_ name: String, among names: [String]) -> [String] {
        names.filter { editDistance(name, $0) <= max(1, min(name.count, $0.count) / 3) }
    }

    /// Edit distance counting a swap of two neighbours as one edit (optimal string alignment),
    /// for "did you mean": `brust` is one edit from `burst`. Config keys are short, so the
    /// quadratic cost is nothing.
    private static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        guard !a.isEmpty, !b.isEmpty else { return max(a.count, b.count) }
        var d = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { d[i][0] = i }
        for j in 0...b.count { d[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                d[i][j] = Swift.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] { d[i][j] = Swift.min(d[i][j], d[i - 2][j - 2] + 1) }
            }
        }
        return d[a.count][b.count]
    }
}

/// One key of a ``ModuleConfigKeys`` declaration. Made with the static functions, which read
/// as the YAML they describe: `.int("interval_seconds", default: 10, minimum: 1)`.
public struct ModuleConfigKey: Sendable, Hashable {
    public let name: String
    public let type: ModuleConfigType
    /// Used when the section leaves the key out.
    public let defaultValue: ConfigValue?
    /// The section must give it (a required key has no default).
    public let isRequired: Bool
    /// What the key means, for messages and generated docs.
    public let help: String

    public init(name: String, type: ModuleConfigType, defaultValue: ConfigValue? = nil, isRequired: Bool = false, help: String = "") {
        self.name = name
        self.type = type
        self.defaultValue = defaultValue
        self.isRequired = isRequired
        self.help = help
    }

    public static func string(_ name: String, default value: String? = nil, required: Bool = false, help: String = "") -> Self {
        Self(name: name, type: .string, defaultValue: value.map(ConfigValue.string), isRequired: required, help: help)
    }

    /// A string that must be one of `choices`.
    public static func choice(_ name: String, _ choices: [String], default value: String? = nil, required: Bool = false, help: String = "") -> Self {
        Self(name: name, type: .choice(choices), defaultValue: value.map(ConfigValue.string), isRequired: required, help: help)
    }

    public static func int(_ name: String, default value: Int? = nil, minimum: Int? = nil, maximum: Int? = nil,
                           required: Bool = false, help: String = "") -> Self {
        Self(name: name, type: .int(minimum: minimum, maximum: maximum), defaultValue: value.map(ConfigValue.int),
             isRequired: required, help: help)
    }

    /// A number: YAML `10` and `2.5` both fit.
    public static func double(_ name: String, default value: Double? = nil, minimum: Double? = nil, maximum: Double? = nil,
                              required: Bool = false, help: String = "") -> Self {
        Self(name: name, type: .double(minimum: minimum, maximum: maximum), defaultValue: value.map(ConfigValue.double),
             isRequired: required, help: help)
    }

    public static func bool(_ name: String, default value: Bool? = nil, required: Bool = false, help: String = "") -> Self {
        Self(name: name, type: .bool, defaultValue: value.map(ConfigValue.bool), isRequired: required, help: help)
    }

    /// A list of strings (`[a, b]`).
    public static func strings(_ name: String, default value: [String]? = nil, required: Bool = false, help: String = "") -> Self {
        Self(name: name, type: .list(.string), defaultValue: value.map { .array($0.map(ConfigValue.string)) },
             isRequired: required, help: help)
    }

    /// A list whose items are all `item` (for example `.table([...])` for a list of tables).
    public static func list(_ name: String, of item: ModuleConfigType, default value: [ConfigValue]? = nil,
                            required: Bool = false, help: String = "") -> Self {
        Self(name: name, type: .list(item), defaultValue: value.map(ConfigValue.array), isRequired: required, help: help)
    }

    /// A nested table with keys of its own, checked the same way.
    public static func table(_ name: String, _ keys: ModuleConfigKeys, required: Bool = false, help: String = "") -> Self {
        Self(name: name, type: .table(keys), isRequired: required, help: help)
    }

    /// `interval_seconds (an integer ≥ 1, default 10: seconds between ticks)`.
    public var summary: String {
        var text = "\(name) (\(type.article)"
        if isRequired { text += ", required" }
        if let defaultValue { text += ", default \(defaultValue)" }
        if !help.isEmpty { text += ": \(help)" }
        return text + ")"
    }
}

/// The type of a declared key's value.
public indirect enum ModuleConfigType: Sendable, Hashable {
    case string
    case choice([String])
    case int(minimum: Int?, maximum: Int?)
    case double(minimum: Double?, maximum: Double?)
    case bool
    case list(ModuleConfigType)
    case table(ModuleConfigKeys)

    /// `an integer ≥ 1`, `a list of strings`, `a table {a (a string), …}`.
    public var article: String {
        switch self {
        case .string: return "a string"
        case .choice(let choices): return "one of \(choices.joined(separator: ", "))"
        case .int(let minimum, let maximum): return "an integer" + Self.bounds(minimum.map(String.init), maximum.map(String.init))
        case .double(let minimum, let maximum): return "a number" + Self.bounds(minimum?.clean, maximum?.clean)
        case .bool: return "true or false"
        case .list(let item): return "a list of " + item.plural
        case .table(let keys): return "a table {\(keys.summary)}"
        }
    }

    private var plural: String {
        switch self {
        case .string: return "strings"
        case .int: return "integers"
        case .double: return "numbers"
        case .bool: return "booleans"
        default: return "items each " + article
        }
    }

    private static func bounds(_ minimum: String?, _ maximum: String?) -> String {
        switch (minimum, maximum) {
        case (let low?, let high?): return " from \(low) to \(high)"
        case (let low?, nil): return " ≥ \(low)"
        case (nil, let high?): return " ≤ \(high)"
        case (nil, nil): return ""
        }
    }

    /// Problems of `value` as this type; `path` is where it sits in the section.
    func check(_ value: ConfigValue, at path: [String]) -> [ModuleConfigProblem] {
        func wrong() -> [ModuleConfigProblem] {
            [ModuleConfigProblem(path: path, message: "expected \(article), found \(value.found)")]
        }
        switch (self, value) {
        case (.string, .string), (.bool, .bool):
            return []
        case (.choice(let choices), .string(let text)):
            return choices.contains(text) ? [] : [ModuleConfigProblem(path: path, message: "expected one of: \(choices.joined(separator: ", ")), found \"\(text)\"")]
        case (.int(let minimum, let maximum), .int(let number)):
            return Self.range(Double(number), minimum.map(Double.init), maximum.map(Double.init), found: String(number), at: path)
        case (.double(let minimum, let maximum), .int(let number)):
            return Self.range(Double(number), minimum, maximum, found: String(number), at: path)
        case (.double(let minimum, let maximum), .double(let number)):
            return Self.range(number, minimum, maximum, found: "\(number)", at: path)
        case (.list(let item), .array(let items)):
            return items.enumerated().flatMap { index, element in
                var itemPath = path.isEmpty ? ["[\(index)]"] : path
                if !path.isEmpty { itemPath[itemPath.count - 1] += "[\(index)]" }
                return item.check(element, at: itemPath)
            }
        case (.table(let keys), .table(let values)):
            return keys.check(values, at: path)
        default:
            return wrong()
        }
    }

    private static func range(_ number: Double, _ minimum: Double?, _ maximum: Double?, found: String, at path: [String]) -> [ModuleConfigProblem] {
        if let minimum, number < minimum { return [ModuleConfigProblem(path: path, message: "must be at least \(minimum.clean), found \(found)")] }
        if let maximum, number > maximum { return [ModuleConfigProblem(path: path, message: "must be at most \(maximum.clean), found \(found)")] }
        return []
    }
}

extension Double {
    /// `1` rather than `1.0` for whole numbers.
    fileprivate var clean: String {
        self == rounded() && abs(self) < 1e15 ? String(Int64(self)) : "\(self)"
    }
}

extension ConfigValue {
    /// What a value is, for "expected …, found …".
    var found: String {
        switch self {
        case .string(let text): return "the string \"\(text)\""
        case .int(let number): return "the integer \(number)"
        case .double(let number): return "the number \(number)"
        case .bool(let flag): return String(flag)
        case .array: return "a list"
        case .table: return "a table"
        }
    }
}

/// One thing wrong with a module's config section.
public struct ModuleConfigProblem: Sendable, Hashable, CustomStringConvertible {
    /// Where, inside the section: key names, a list item as `name[2]`; empty for the section
    /// itself (a missing required key, a mistake in the declaration).
    public var path: [String]
    public var message: String

    public init(path: [String], message: String) {
        self.path = path
        self.message = message
    }

    /// `limits.burst: expected an integer, found the string "ten"`.
    public var description: String {
        path.isEmpty ? message : path.joined(separator: ".") + ": " + message
    }
}
