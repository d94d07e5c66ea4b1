import EventBusKit
import Foundation

/// A text with `{{field}}` placeholders, filled from the triggering event.
///
/// `{{FIELD}}` is the field's text (empty when the event has no such field); `{{event.name}}`,
/// `{{event.seq}}`, `{{event.source}}` and `{{event.time}}` (RFC 3339) are the event's own
/// members, and `{{event.count}}` the number of events a `collect` or `all_of` gathered.
/// Expanding never parses the result again: a value holding `{{`, quotes, spaces, newlines or
/// shell syntax is only text, and a template used as one argv element stays one element.
public struct RuleTemplate: Sendable, Equatable, CustomStringConvertible {
    enum Segment: Sendable, Equatable {
        case text(String)
        case field(String)
    }

    let segments: [Segment]
    /// As written in the config.
    public let description: String

    /// Parses `text`; throws the reason for an unclosed or empty placeholder.
    public init(_ text: String) throws(RuleTemplateError) {
        var segments: [Segment] = []
        var rest = Substring(text)
        while let open = rest.range(of: "{{") {
            if open.lowerBound > rest.startIndex { segments.append(.text(String(rest[..<open.lowerBound]))) }
            guard let close = rest[open.upperBound...].range(of: "}}") else {
                throw RuleTemplateError(message: "\"{{\" without a closing \"}}\"")
            }
            let name = rest[open.upperBound..<close.lowerBound].trimmingCharacters(in: .whitespaces)
            guard !name.isEmpty, !name.contains("{"), !name.contains("}") else {
                throw RuleTemplateError(message: "\"{{\(rest[open.upperBound..<close.lowerBound])}}\" names no field")
            }
            segments.append(.field(name))
            rest = rest[close.upperBound...]
        }
        if !rest.isEmpty { segments.append(.text(String(rest))) }
        self.segments = segments
        self.description = text
    }

    /// A text with no placeholders, taken as it is (`{{` included).
    public init(literal text: String) {
        self.segments = text.isEmpty ? [] : [.text(text)]
        self.description = text
    }

    /// Whether the text holds any placeholder.
    public var hasPlaceholders: Bool { segments.contains { if case .field = $0 { true } else { false } } }

    /// The text for `trigger`.
    public func expand(_ trigger: RuleTriggerEvents) -> String {
        var result = ""
        for segment in segments {
            switch segment {
            case .text(let text): result += text
            case .field(let name): result += trigger.value(of: name)
            }
        }
        return result
    }
}

public struct RuleTemplateError: Error, Sendable, Equatable {
    public var message: String
}

/// What triggered one run: the events, in order — one, or those a `collect` or `all_of`
/// gathered; the last is the one templates and `EVENTBUS_*` variables describe.
public struct RuleTriggerEvents: Sendable {
    public var events: [Event]

    public init(_ events: [Event]) {
        precondition(!events.isEmpty, "a trigger has at least one event")
        self.events = events
    }

    public var last: Event { events[events.count - 1] }

    func value(of name: String) -> String {
        switch name {
        case "event.name": return last.name
        case "event.seq": return String(last.sequence)
        case "event.source": return last.source
        case "event.time": return FieldValue.date(last.wallTime).description
        case "event.count": return String(events.count)
        default: return last.fields[name]?.description ?? ""
        }
    }
}
