import EventBusKit

/// Where a module's config section (`modules.NAME.config`) sits in the host's config file, key by
/// key, so a problem the module's declaration finds can be named as `file:line: key`.
public struct ModuleConfigLocations: Sendable {
    public var file: String
    /// The dotted key of the section: `modules.hello.config`.
    public var key: String
    /// The line of `config:`, or of the module's entry when it has no section.
    public var sectionLine: Int?
    /// The line of each key inside the section, by its path relative to the section
    /// (`greeting`, `limits.burst`, `targets[1].name`).
    public var lines: [String: Int] = [:]

    public init(file: String, key: String, sectionLine: Int?, lines: [String: Int] = [:]) {
        self.file = file
        self.key = key
        self.sectionLine = sectionLine
        self.lines = lines
    }

    /// The line of `path`, or of the closest enclosing key that has one.
    func line(of path: [String]) -> Int? {
        var path = path
        while !path.isEmpty {
            if let line = lines[path.joined(separator: ".")] { return line }
            // `targets[1]` → `targets`, then up one key.
            if let last = path.last, let bracket = last.lastIndex(of: "[") {
                path[path.count - 1] = String(last[..<bracket])
            } else {
                path.removeLast()
            }
        }
        return sectionLine
    }
}

/// A module's config section refused by the module's own declaration
/// (``EventBusModule/configKeys``): every problem with file, line and key, and the keys the
/// module reads. The same words in `--check-config`, at start, on reload, in eventbusd and in a
/// worker process.
///
/// Threads: made on the host's control queue (start, reload) or the `--check-config` thread,
/// before any call into the module; a worker checks on its main thread before `activate` and on
/// the module's queue before `reconfigure` (a check worker of `--check-config` on its main
/// thread), and reports only paths and messages (pure values).
public struct ModuleConfigRefusal: Error, Sendable, CustomStringConvertible {
    public var problems: [ConfigError]
    /// `modules.hello.config takes: greeting (a string, default "hello"), …`.
    public var validKeys: String

    /// Checks `config` against `keys`; nil when it passes (or nothing is declared).
    public static func check(_ config: ModuleConfig, keys: ModuleConfigKeys, at locations: ModuleConfigLocations) -> ModuleConfigRefusal? {
        refusal(keys.check(config.values), keysSummary: keys.summary, at: locations)
    }

    /// Problems found elsewhere (by a worker process) placed in the file.
    public static func refusal(_ problems: [ModuleConfigProblem], keysSummary: String, at locations: ModuleConfigLocations) -> ModuleConfigRefusal? {
        guard !problems.isEmpty else { return nil }
        let errors = problems.map { problem in
            ConfigError(file: locations.file, line: locations.line(of: problem.path),
                        key: ([locations.key] + problem.path).joined(separator: "."), message: problem.message)
        }.enumerated().sorted { ($0.element.line ?? 0, $0.offset) < ($1.element.line ?? 0, $1.offset) }.map(\.element)  // file order
        return ModuleConfigRefusal(problems: errors, validKeys: "\(locations.key) takes: \(keysSummary)")
    }

    /// One line per problem, then the valid keys.
    public var description: String {
        (problems.map { ConfigError.combined([$0])!.description } + [validKeys]).joined(separator: "\n")
    }

    /// The whole story on one line, for a module's status.
    public var summary: String {
        "config refused: " + problems.map { "\($0.key): \($0.message)" }.joined(separator: "; ")
    }
}

extension ModuleEntry {
    /// The module's section with the module's declaration attached, so `context.config` reads
    /// through it (declared defaults, undeclared keys refused).
    func config(declaredBy keys: ModuleConfigKeys) -> ModuleConfig {
        var config = config
        config.keys = keys
        return config
    }

    /// Why a module that declares nothing gets its section unchecked, when it has one.
    func undeclaredWarning(keys: ModuleConfigKeys) -> String? {
        guard !keys.isDeclared, !config.values.isEmpty else { return nil }
        return "\(configLocations.file):\(configLocations.sectionLine ?? 0): \(configLocations.key): not checked: module \(name) declares no configKeys, so a mistyped key here is not noticed"
    }
}
