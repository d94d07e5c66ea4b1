import Foundation

/// Turns spec text into a ``CalendarSchedule``; the grammar is documented on that type. It works on
/// substrings of `spec` throughout, so every error can give the position of the text it rejects.
struct CalendarSpecParser {
    typealias Component = CalendarSchedule.Component
    typealias Field = CalendarSchedule.Field

    let spec: String

    /// systemd's shorthands and what they stand for (systemd.time(7)).
    private static let shorthands: [String: String] = [
        "minutely": "*-*-* *:*:00",
        "hourly": "*-*-* *:00:00",
        "daily": "*-*-* 00:00:00",
        "weekly": "Mon *-*-* 00:00:00",
        "monthly": "*-*-01 00:00:00",
        "quarterly": "*-01,04,07,10-01 00:00:00",
        "semiannually": "*-01,07-01 00:00:00",
        "yearly": "*-01-01 00:00:00",
        "annually": "*-01-01 00:00:00",
    ]

    private static let weekdayNames = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]

    /// `00`, what an omitted time's fields and omitted seconds stand for.
    private static let zero = Component(items: [.init(first: 0, last: 0, step: 1)])

    func parse(defaultTimeZone: TimeZone) throws -> CalendarSchedule {
        var tokens = spec.split(whereSeparator: \.isWhitespace)
        guard let first = tokens.first else { throw EventBusError(.invalidCalendarSpec, "the calendar spec is empty") }
        // Only a zone starts with a letter after the first token, so the last such token is one.
        var zone: (timeZone: TimeZone, name: String)?
        if tokens.count > 1, let last = tokens.last, last.first?.isLetter == true {
            zone = try parseZone(last)
            tokens.removeLast()
        }
        let pattern: CalendarSchedule.Pattern
        if let expansion = Self.shorthands[first.lowercased()] {
            if tokens.count > 1 {
                throw failure("only a time zone may follow the shorthand \"\(first)\", not \"\(tokens[1])\"", at: tokens[1])
            }
            let expanded = CalendarSpecParser(spec: expansion)
            pattern = try expanded.parsePattern(expanded.spec.split(separator: " "))
        } else {
            pattern = try parsePattern(tokens)
        }
        return CalendarSchedule(timeZone: zone?.timeZone ?? defaultTimeZone, zoneName: zone?.name, pattern: pattern)
    }

    /// `[WEEKDAYS] [DATE] [TIME]`, in that order, at least one of them (`tokens` is not empty).
    private func parsePattern(_ tokens: [Substring]) throws -> CalendarSchedule.Pattern {
        var rest = tokens[...]
        var weekdays = CalendarSchedule.Weekdays.all
        if let first = rest.first, first.first?.isLetter == true {
            weekdays = try parseWeekdays(first)
            rest = rest.dropFirst()
        }
        var date: (year: Component, month: Component, day: Component)?
        var time: (hour: Component, minute: Component, second: Component)?
        for token in rest {
            if token.first?.isLetter == true {
                throw failure("unexpected \"\(token)\": weekdays come first and a time zone last", at: token)
            } else if token.contains(":") {
                guard time == nil else { throw failure("second time \"\(token)\"", at: token) }
                time = try parseTime(token)
            } else if token.contains("-") || token.contains("~") {
                guard date == nil else { throw failure("second date \"\(token)\"", at: token) }
                guard time == nil else { throw failure("the date \"\(token)\" must come before the time", at: token) }
                date = try parseDate(token)
            } else {
                throw failure("\"\(token)\" is neither a date (YYYY-MM-DD) nor a time (HH:MM[:SS])", at: token)
            }
        }
        return CalendarSchedule.Pattern(
            weekdays: weekdays,
            year: date?.year ?? .any, month: date?.month ?? .any, day: date?.day ?? .any,
            hour: time?.hour ?? Self.zero, minute: time?.minute ?? Self.zero, second: time?.second ?? Self.zero
        )
    }

    private func parseZone(_ token: Substring) throws -> (timeZone: TimeZone, name: String) {
        if token.lowercased() == "utc" { return (.gmt, "UTC") }
        if let zone = TimeZone(identifier: String(token)) { return (zone, String(token)) }
        if (try? parseWeekdays(token)) != nil {
            throw failure("weekdays \"\(token)\" must come first", at: token)
        }
        throw failure("unknown time zone \"\(token)\"", at: token)
    }

    private func parseWeekdays(_ token: Substring) throws -> CalendarSchedule.Weekdays {
        var mask: UInt8 = 0
        for item in token.split(separator: ",", omittingEmptySubsequences: false) {
            let ends = item.split(separator: "..", omittingEmptySubsequences: false)
            guard ends.count <= 2 else { throw failure("weekday range \"\(item)\" has more than one \"..\"", at: item) }
            let from = try weekday(ends[0], in: token)
            let to = try weekday(ends[ends.count - 1], in: token)
            guard from <= to else {
                throw failure("weekday range \"\(item)\" runs backwards (weeks run Monday to Sunday)", at: item)
            }
            for day in from...to { mask |= 1 << day }
        }
        return .init(mask: mask)
    }

    private func weekday(_ name: Substring, in token: Substring) throws -> Int {
        let lowercased = name.lowercased()
        if let index = Self.weekdayNames.firstIndex(where: { $0 == lowercased || $0.prefix(3) == lowercased }) {
            return index
        }
        if name.isEmpty { throw failure("weekday missing in \"\(token)\"", at: name) }
        if name == token {
            throw failure("\"\(token)\" is neither a weekday nor a shorthand (\(Self.shorthands.keys.sorted().joined(separator: ", ")))", at: token)
        }
        throw failure("unknown weekday \"\(name)\"", at: name)
    }

    private func parseDate(_ token: Substring) throws -> (year: Component, month: Component, day: Component) {
        if let tilde = token.firstIndex(of: "~") {
            throw failure("\"~\" (days counted from the end of the month) is not supported", at: token[tilde...])
        }
        let parts = token.split(separator: "-", omittingEmptySubsequences: false)
        switch parts.count {
        case 2: return (.any, try component(parts[0], .month), try component(parts[1], .day))
        case 3: return (try component(parts[0], .year), try component(parts[1], .month), try component(parts[2], .day))
        default: throw failure("date \"\(token)\" is not YYYY-MM-DD or MM-DD", at: token)
        }
    }

    private func parseTime(_ token: Substring) throws -> (hour: Component, minute: Component, second: Component) {
        let parts = token.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2 || parts.count == 3 else {
            throw failure("time \"\(token)\" is not HH:MM or HH:MM:SS", at: token)
        }
        if parts.count == 3, parts[2].contains(".") {
            throw failure("fractional seconds \"\(parts[2])\" are not supported", at: parts[2])
        }
        return (try component(parts[0], .hour), try component(parts[1], .minute),
                parts.count == 3 ? try component(parts[2], .second) : Self.zero)
    }

    private func component(_ text: Substring, _ field: Field) throws -> Component {
        guard !text.isEmpty else { throw failure("\(field) missing", at: text) }
        if text == "*" { return .any }
        var seen = Set<Component.Item>()
        let items = try text.split(separator: ",", omittingEmptySubsequences: false)
            .map { try item($0, field) }
            .filter { seen.insert($0).inserted }
        return Component(items: items.sorted { $0.sortKey < $1.sortKey })
    }

    /// `N`, `A..B`, `N/STEP` or `A..B/STEP`, normalized so that equal sets of values in the same
    /// form compare equal: a range of one value is a number, `/1` on a range is dropped, and a
    /// stepped range ends at the last value it hits (`1..10/2` is `1..9/2`), as systemd prints them.
    private func item(_ text: Substring, _ field: Field) throws -> Component.Item {
        guard !text.isEmpty else { throw failure("empty item in the \(field) list", at: text) }
        if text.hasPrefix("*") {
            throw failure(text.hasPrefix("*/")
                ? "\"\(text)\" is not supported; a repetition starts at a number, e.g. \"\(field.bounds.lowerBound)\(text.dropFirst())\""
                : "\"*\" cannot be part of a \(field) list", at: text)
        }
        let stepParts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard stepParts.count <= 2 else { throw failure("\"\(text)\" has more than one \"/\"", at: text) }
        let ends = stepParts[0].split(separator: "..", omittingEmptySubsequences: false)
        guard ends.count <= 2 else { throw failure("\"\(stepParts[0])\" has more than one \"..\"", at: stepParts[0]) }

        let first = try number(ends[0], field)
        let end = ends.count == 2 ? try number(ends[1], field) : nil
        if let end, end < first {
            throw failure("\(field) range \"\(stepParts[0])\" runs backwards", at: stepParts[0])
        }
        guard stepParts.count == 2 else { return .init(first: first, last: end ?? first, step: 1) }

        let stepText = stepParts[1]
        guard let step = digits(stepText), step >= 1 else {
            throw failure("step \"\(stepText)\" is not a whole number of at least 1", at: stepText)
        }
        guard let end else {
            // systemd's rule: a repetition must reach a second value within the field.
            guard step <= field.bounds.upperBound - first else {
                throw failure("repetition \"\(text)\" never repeats: the \(field) goes up to \(field.bounds.upperBound)", at: text)
            }
            return .init(first: first, last: nil, step: step)
        }
        let trimmedEnd = first + (end - first) / step * step
        return .init(first: first, last: trimmedEnd, step: trimmedEnd == first ? 1 : step)
    }

    private func number(_ text: Substring, _ field: Field) throws -> Int {
        guard let value = digits(text) else { throw failure("\(field) \"\(text)\" is not a number", at: text) }
        guard field.bounds.contains(value) else {
            throw failure("\(field) \"\(text)\" is out of range \(field.bounds.lowerBound)..\(field.bounds.upperBound)", at: text)
        }
        return value
    }

    /// The value of a non-empty run of ASCII digits (`Int.max` if it does not fit, so range checks
    /// reject it), or nil for anything else, signs included.
    private func digits(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.allSatisfy({ ("0"..."9").contains($0) }) else { return nil }
        return Int(text) ?? .max
    }

    private func failure(_ problem: String, at text: Substring) -> EventBusError {
        let position = spec.distance(from: spec.startIndex, to: text.startIndex) + 1
        return EventBusError(.invalidCalendarSpec, "\(problem) at position \(position) in \"\(spec)\"")
    }
}
