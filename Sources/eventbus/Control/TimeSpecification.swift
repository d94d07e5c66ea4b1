import ControlProtocol
import Foundation

/// Where `tail --since` / `--until` start or stop: an event's cursor, or a time written as
/// journalctl users write it.
///
/// - `LIFE:1234` (what `post --print-seq` prints), `1234` or `#1234`: the event with that
///   sequence number, in that host life or (bare) in the running host's (``EventCursor``);
/// - `now`, `today`, `yesterday`, `tomorrow` (midnight, local time);
/// - relative: `1h`, `-1h`, `30min ago`, `1h30m`, `2 days ago` (in the past), `+5m` (ahead);
///   units `us`, `ms`, `s`/`sec`, `m`/`min`, `h`/`hour`, `d`/`day`, `w`/`week` (and plurals);
/// - absolute, local time unless it ends in `UTC` or `Z`: `2026-11-23`, `2026-11-23 09:00`,
///   `2026-11-23 09:00:05`, `2026-11-23T09:00:05`, `09:00` or `09:00:05` (today);
/// - `@1763888400` or `@1763888400.25`: seconds since the Unix epoch.
enum TimeSpecification: Equatable {
    case cursor(EventCursor)
    case time(Date)

    struct ParseError: Error, CustomStringConvertible {
        var text: String
        var description: String {
            "\"\(text)\" is neither an event cursor nor a time (try LIFE:1234, 1234, 10min, \"2026-11-23 09:00\", today, yesterday, @EPOCH)"
        }
    }

    static func parse(_ text: String, now: Date = Date(), timeZone: TimeZone = .current) throws(ParseError) -> TimeSpecification {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if let cursor = EventCursor(trimmed) { return .cursor(cursor) }
        guard let date = date(trimmed.lowercased(), now: now, timeZone: timeZone) else { throw ParseError(text: text) }
        return .time(date)
    }

    private static func date(_ text: String, now: Date, timeZone: TimeZone) -> Date? {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        switch text {
        case "now": return now
        case "today": return calendar.startOfDay(for: now)
        case "yesterday": return calendar.date(byAdding: .day, value: -1, to: calendar.startOfDay(for: now))
        case "tomorrow": return calendar.date(byAdding: .day, value: 1, to: calendar.startOfDay(for: now))
        default: break
        }
        if text.hasPrefix("@") {
            guard let seconds = Double(text.dropFirst()), seconds.isFinite else { return nil }
            return Date(timeIntervalSince1970: seconds)
        }
        if let offset = relativeSeconds(text) { return now.addingTimeInterval(offset) }
        return absolute(text, now: now, calendar: calendar)
    }

    /// `1h`, `-1h`, `1h30m ago`, `+5 min`: seconds from now (negative: in the past).
    private static func relativeSeconds(_ text: String) -> Double? {
        var body = Substring(text)
        var sign = -1.0  // a bare duration means "that long ago", as for --since 1h
        if body.hasPrefix("+") { sign = 1; body = body.dropFirst() } else if body.hasPrefix("-") { body = body.dropFirst() }
        if body.hasSuffix(" ago") { body = body.dropLast(4) }
        var total = 0.0
        var rest = body.filter { $0 != " " }[...]
        guard !rest.isEmpty else { return nil }
        while !rest.isEmpty {
            let number = rest.prefix { $0.isNumber || $0 == "." }
            guard !number.isEmpty, let value = Double(number) else { return nil }
            rest = rest.dropFirst(number.count)
            let unit = rest.prefix { $0.isLetter }
            guard let scale = unitSeconds[String(unit)] else { return nil }
            rest = rest.dropFirst(unit.count)
            total += value * scale
        }
        return sign * total
    }

    private static let unitSeconds: [String: Double] = {
        var units: [String: Double] = ["us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3]
        for (names, seconds) in [(["s", "sec", "secs", "second", "seconds"], 1.0),
                                 (["m", "min", "mins", "minute", "minutes"], 60),
                                 (["h", "hr", "hour", "hours"], 3600),
                                 (["d", "day", "days"], 86400),
                                 (["w", "week", "weeks"], 604_800)] {
            for name in names { units[name] = seconds }
        }
        return units
    }()

    /// `YYYY-MM-DD[( |T)HH:MM[:SS[.fff]]]` or `HH:MM[:SS]` (today), optionally ending in ` utc` / `z`.
    private static func absolute(_ text: String, now: Date, calendar: Calendar) -> Date? {
        var calendar = calendar
        var body = text
        if body.hasSuffix(" utc") || body.hasSuffix("z") {
            body = String(body.dropLast(body.hasSuffix("z") ? 1 : 4))
            calendar.timeZone = TimeZone(identifier: "UTC")!
        }
        let parts = body.split(whereSeparator: { $0 == " " || $0 == "t" }).map(String.init)
        guard (1...2).contains(parts.count) else { return nil }
        var components = DateComponents()
        var clock: String?
        if parts[0].contains("-") {
            let date = parts[0].split(separator: "-", omittingEmptySubsequences: false)
            guard date.count == 3, let year = Int(date[0]), let month = Int(date[1]), let day = Int(date[2]),
                  date[0].count == 4, (1...12).contains(month), (1...31).contains(day) else { return nil }
            components.year = year; components.month = month; components.day = day
            clock = parts.count == 2 ? parts[1] : nil
        } else {
            guard parts.count == 1 else { return nil }
            let today = calendar.dateComponents([.year, .month, .day], from: now)
            components.year = today.year; components.month = today.month; components.day = today.day
            clock = parts[0]
        }
        components.hour = 0; components.minute = 0; components.second = 0
        var fraction = 0.0
        if let clock {
            let fields = clock.split(separator: ":", omittingEmptySubsequences: false)
            guard (2...3).contains(fields.count), let hour = Int(fields[0]), let minute = Int(fields[1]),
                  (0...23).contains(hour), (0...59).contains(minute) else { return nil }
            components.hour = hour; components.minute = minute
            if fields.count == 3 {
                guard let seconds = Double(fields[2]), (0..<61).contains(seconds) else { return nil }
                components.second = Int(seconds)
                fraction = seconds - seconds.rounded(.down)
            }
        }
        // A date the calendar would roll over (Feb 30) is a typo, not March 2.
        guard let date = calendar.date(from: components),
              calendar.component(.day, from: date) == components.day else { return nil }
        return date.addingTimeInterval(fraction)
    }
}
