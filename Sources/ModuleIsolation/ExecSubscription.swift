import ControlProtocol
@_spi(EventBusHost) import EventBusKit

/// One subscription of an exec module, as its config (`subscribe:`) or its program (a
/// `subscribe` line) writes it: an event pattern, then optional field matches as `eventbus tail`
/// takes them — `"unit.state active=failed"`, `"fs.* path=/etc/*.conf"`. Patterns hold no
/// whitespace, so the words need no quoting.
public struct ExecSubscription: Sendable, Hashable, CustomStringConvertible {
    public var pattern: String
    /// Field → the values it accepts (alternatives); different fields must all match.
    public var matches: [String: [String]]

    public struct ParseError: Error, CustomStringConvertible, Sendable {
        public var description: String
    }

    /// Reads `text`: a valid pattern, then `FIELD=VALUE` words with a non-empty field.
    public init(parsing text: String) throws(ParseError) {
        let words = text.split(whereSeparator: \.isWhitespace).map(String.init)
        guard let first = words.first else { throw ParseError(description: "a subscription is a pattern, found nothing") }
        do {
            _ = try EventPattern(first)
        } catch {
            throw ParseError(description: (error as? EventBusError)?.message ?? "\(error)")
        }
        pattern = first
        matches = [:]
        for word in words.dropFirst() {
            guard let equals = word.firstIndex(of: "="), equals != word.startIndex else {
                throw ParseError(description: "\"\(word)\": a field match is FIELD=VALUE, after the pattern \(first)")
            }
            matches[String(word[..<equals]), default: []].append(String(word[word.index(after: equals)...]))
        }
    }

    public var description: String {
        ([pattern] + matches.keys.sorted().flatMap { field in matches[field]!.map { "\(field)=\($0)" } }).joined(separator: " ")
    }

    /// The request the host holds its subscription under (``ModuleForwarding``): a restarted
    /// program that subscribes the same again takes over the held one.
    var spec: JSON {
        ["patterns": [.string(pattern)],
         "match": .object(matches.mapValues { .array($0.map(JSON.string)) })]
    }
}
