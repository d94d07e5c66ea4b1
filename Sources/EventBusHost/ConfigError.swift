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

    public init(file: String, line: Int?, key: String, message: String) {
        self.file = file
        self.line = line
        self.key = key
        self.message = message
    }

    public var description: String {
        var text = file
        if let line { text += ":\(line)" }
        if !key.isEmpty { text += ": \(key)" }
        return text + ": " + message
    }
}
