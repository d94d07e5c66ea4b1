import EventBusKit

/// A rule's `where:`: per field, the values it accepts — alternatives for one field (OR),
/// every field named (AND), as `eventbus tail FIELD=VALUE` matches — plus numeric comparisons.
///
/// A value is one of:
/// - a text, compared with the field's text (`unit: nginx.service`, `code: 3` matches the int 3);
/// - a glob with `*` or `?` (`path: "/etc/nginx/*.conf"`), as ``FieldMatch`` matches it;
/// - a comparison `>N`, `>=N`, `<N`, `<=N`, `!=N` with a number, true for a numeric field (or
///   a text that reads as a number) that compares so.
/// An event without the field does not match.
public struct RuleConditions: Sendable, Equatable {
    struct Condition: Sendable, Equatable {
        var match = FieldMatch()
        var comparisons: [Comparison] = []

        func accepts(_ value: FieldValue) -> Bool {
            if !match.exact.isEmpty || !match.globs.isEmpty, match.accepts(value.description) { return true }
            guard !comparisons.isEmpty, let number = value.doubleValue ?? Double(value.description) else { return false }
            return comparisons.contains { $0.holds(for: number) }
        }
    }

    struct Comparison: Sendable, Equatable {
        enum Operator: String, Sendable, CaseIterable {
            // Longest first, so `>=` is not read as `>` and `=5`.
            case atLeast = ">=", atMost = "<=", notEqual = "!=", greater = ">", less = "<"
        }
        var op: Operator
        var value: Double

        func holds(for number: Double) -> Bool {
            switch op {
            case .atLeast: return number >= value
            case .atMost: return number <= value
            case .notEqual: return number != value
            case .greater: return number > value
            case .less: return number < value
            }
        }

        /// `>=90` and the like; nil for any other text (a plain value or glob).
        init?(_ text: String) {
            guard let op = Operator.allCases.first(where: { text.hasPrefix($0.rawValue) }) else { return nil }
            let number = text.dropFirst(op.rawValue.count).drop(while: \.isWhitespace)
            guard let value = Double(number), value.isFinite else { return nil }
            self.op = op
            self.value = value
        }
    }

    /// Field name → what it accepts, in the order written.
    private(set) var fields: [(name: String, condition: Condition)] = []

    public init() {}

    public var isEmpty: Bool { fields.isEmpty }

    /// Adds `value` to what `field` accepts. Returns false for a text that starts like a
    /// comparison but has no number after it (`>= ninety`): a mistake, not a literal.
    @discardableResult
    mutating func add(_ value: String, to field: String) -> Bool {
        let index: Int
        if let found = fields.firstIndex(where: { $0.name == field }) {
            index = found
        } else {
            fields.append((field, Condition()))
            index = fields.count - 1
        }
        if let comparison = Comparison(value) {
            fields[index].condition.comparisons.append(comparison)
            return true
        }
        if Comparison.Operator.allCases.contains(where: { value.hasPrefix($0.rawValue) }) { return false }
        fields[index].condition.match.add(value)
        return true
    }

    @inline(__always)
    public func accepts(_ event: Event) -> Bool {
        for (name, condition) in fields {
            guard let value = event.fields[name], condition.accepts(value) else { return false }
        }
        return true
    }

    public static func == (lhs: RuleConditions, rhs: RuleConditions) -> Bool {
        lhs.fields.map(\.name) == rhs.fields.map(\.name) && lhs.fields.map(\.condition) == rhs.fields.map(\.condition)
    }
}
