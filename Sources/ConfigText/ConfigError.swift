/// A problem in the host's config file, located the way an editor wants it:
/// `/etc/eventbus/eventbus.yaml:12: modules.hello.path: expected a string, found 12`.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The config file as it was named.
    public var file: String
    /// 1-based line, when the problem has a place in the file (not for an unreadable file).
    public var line: Int?
    /// Dotted path of the key, e.g. `modules.hello.path` or `sources.timers[1].every`; empty for
    /// the document itself.
    public var key: String
    public var message: String
    /// Further problems found in the same file, in file order: one read of the config reports
    /// every section and module that is wrong, not only the first.
    public var more: [ConfigError] = []

    public init(file: String, line: Int?, key: String, message: String) {
        self.file = file
        self.line = line
        self.key = key
        self.message = message
    }

    /// Every problem, this one first, none holding others.
    public var all: [ConfigError] {
        var first = self
        first.more = []
        return [first] + more.flatMap(\.all)
    }

    /// One line per problem.
    public var description: String {
        all.map { problem in
            var text = problem.file
            if let line = problem.line { text += ":\(line)" }
            if !problem.key.isEmpty { text += ": \(problem.key)" }
            return text + ": " + problem.message
        }.joined(separator: "\n")
    }

    /// `problems` as one error (the first, holding the rest), or nil when there are none.
    public static func combined(_ problems: [ConfigError]) -> ConfigError? {
        let flat = problems.flatMap(\.all)
        guard var first = flat.first else { return nil }
        first.more = Array(flat.dropFirst())
        return first
    }
}

/// Collects the problems of independent parts of a config (sections, modules) so that one bad
/// part does not hide the next.
public struct ConfigProblems {
    public private(set) var errors: [ConfigError] = []

    public init() {}

    /// `body`'s result, or nil with its error kept.
    public mutating func check<T>(_ body: () throws(ConfigError) -> T) -> T? {
        do { return try body() } catch { errors.append(error); return nil }
    }

    /// Throws everything collected, if anything was.
    public func throwIfAny() throws(ConfigError) {
        if let error = ConfigError.combined(errors) { throw error }
    }
}
