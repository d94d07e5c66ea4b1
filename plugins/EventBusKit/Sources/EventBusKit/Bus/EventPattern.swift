/// Which event names a subscription wants.
///
/// The syntax is NATS's subject syntax, so a bus bridged through NATS later keeps its patterns:
/// names are dot-separated tokens; in a pattern, `*` stands for exactly one token and `>` for one
/// or more trailing tokens (only as the last token). `fs.*` matches `fs.created` but not
/// `fs.created.dir`; `fs.>` matches both; `>` matches everything.
///
/// Tokens may not be empty and may not contain whitespace; `*` and `>` must be whole tokens.
public struct EventPattern: Sendable, Hashable, CustomStringConvertible {
    enum Token: Hashable, Sendable {
        case literal(Substring)
        case one
        case rest
    }

    public let description: String
    let tokens: [Token]

    /// Parses a pattern, throwing ``EventBusError/Code/invalidPattern`` with the reason.
    public init(_ text: String) throws {
        var tokens: [Token] = []
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        for (index, part) in parts.enumerated() {
            if let problem = EventPattern.problem(with: part, index: index, in: text) {
                throw EventBusError(.invalidPattern, problem)
            }
            switch part {
            case "*": tokens.append(.one)
            case ">":
                guard index == parts.count - 1 else {
                    throw EventBusError(.invalidPattern, "pattern \"\(text)\": '>' must be the last token")
                }
                tokens.append(.rest)
            default:
                if part.contains("*") || part.contains(">") {
                    throw EventBusError(.invalidPattern,
                        "pattern \"\(text)\": token \"\(part)\" mixes a wildcard with text; '*' and '>' must stand alone")
                }
                tokens.append(.literal(part))
            }
        }
        self.description = text
        self.tokens = tokens
    }

    /// Checks that `name` is a valid event name: the pattern rules, without wildcards.
    public static func validate(eventName name: String) throws {
        let parts = name.split(separator: ".", omittingEmptySubsequences: false)
        for (index, part) in parts.enumerated() {
            if let problem = problem(with: part, index: index, in: name, what: "event name") {
                throw EventBusError(.invalidEventName, problem)
            }
            if part.contains("*") || part.contains(">") {
                throw EventBusError(.invalidEventName, "event name \"\(name)\": '*' and '>' are only for patterns")
            }
        }
    }

    private static func problem(with token: Substring, index: Int, in text: String, what: String = "pattern") -> String? {
        if text.isEmpty { return "\(what) is empty" }
        if token.isEmpty { return "\(what) \"\(text)\": token \(index + 1) is empty (leading, trailing or doubled '.')" }
        if token.contains(where: { $0.isWhitespace || $0.isNewline }) {
            return "\(what) \"\(text)\": token \"\(token)\" contains whitespace"
        }
        return nil
    }

    /// Whether `name` matches. Allocation-free: walks the name's UTF-8 once. The bus caches the
    /// result per event name, so this is off the per-post path.
    public func matches(_ name: String) -> Bool {
        var rest = Substring(name)
        var exhausted = false
        for token in tokens {
            if exhausted { return false }
            if case .rest = token { return true }
            let head: Substring
            if let dot = rest.utf8.firstIndex(of: UInt8(ascii: ".")) {
                head = rest[..<dot]
                rest = rest[rest.utf8.index(after: dot)...]
            } else {
                head = rest
                exhausted = true
            }
            if case .literal(let literal) = token, literal != head { return false }
        }
        return exhausted
    }

    /// Matches every event.
    public static let all = try! EventPattern(">")
}
