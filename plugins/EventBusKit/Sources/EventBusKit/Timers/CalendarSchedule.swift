import Foundation

/// A wall-clock schedule written in a subset of systemd's `OnCalendar=` syntax (systemd.time(7)).
///
/// The timer source arms a wall-clock timer at ``nextFire(after:)``; this type is the pure part of
/// that: parsing, normalizing and the next-fire arithmetic, with no clock and no state, so the same
/// spec and reference date always give the same answer.
///
/// ## Accepted syntax
///
/// `[WEEKDAYS] [DATE] [TIME] [ZONE]`, tokens separated by whitespace, at least one of the first
/// three present; or `SHORTHAND [ZONE]`.
///
/// - **WEEKDAYS**: names `Mon`…`Sun` (three letters or in full, any case), joined by `,` into a list,
///   with `..` for a range (`Mon..Fri`, `Mon,Wed..Fri`, `Sat,Sun`). A range cannot wrap past Sunday,
///   the way systemd counts Monday first. Omitted: every day.
/// - **DATE**: `YYYY-MM-DD` or `MM-DD` (any year). Omitted: `*-*-*`.
/// - **TIME**: `HH:MM` or `HH:MM:SS`; seconds default to `00`. Omitted: `00:00:00`.
/// - Each date and time component is `*` (every value), or a `,`-separated list of items, each of
///   which is a number `5`, a range `8..17`, a repetition `0/15` (start, then every step up to the
///   component's maximum) or a stepped range `1..10/2`. Ranges and numbers are checked against
///   the component's bounds: year 1970…2199 (systemd's range), month 1…12, day 1…31, hour 0…23,
///   minute and second 0…59. A repetition's step must be at least 1 and, like systemd, must not
///   overshoot the component's maximum from its start (`0/30` hours is rejected: it would fire
///   only at 0, which is surely not what was meant).
/// - **SHORTHAND**, as systemd defines them: `minutely` = `*-*-* *:*:00`, `hourly` = `*-*-* *:00:00`,
///   `daily` = `*-*-* 00:00:00`, `weekly` = `Mon *-*-* 00:00:00`, `monthly` = `*-*-01 00:00:00`,
///   `quarterly` = `*-01,04,07,10-01 00:00:00`, `semiannually` = `*-01,07-01 00:00:00`,
///   `yearly`/`annually` = `*-01-01 00:00:00`.
/// - **ZONE**, last: `UTC` (any case) or an identifier `TimeZone(identifier:)` knows, such as an
///   IANA name (`Europe/Berlin`). Omitted: the `defaultTimeZone` given to the parser.
///
/// Weekdays and date must both match (as in systemd). A date that exists in no month (`*-02-30`)
/// parses but never fires. Everything else is rejected with ``EventBusError/Code/invalidCalendarSpec``
/// and a message naming the offending text and its 1-based character position, among others:
/// fractional seconds, the `~` last-days-of-month form, `*/step`, two-digit years, `@epoch`,
/// out-of-range numbers (month 13, hour 24), descending ranges, unknown names and zones.
///
/// ## Time zones and daylight-saving changes
///
/// The pattern is matched against the wall-clock reading in ``timeZone``; systemd 252's behaviour
/// (measured with `systemd-analyze calendar --base-time=…`) decides the two ambiguous cases:
///
/// - A reading that does not exist because the clocks spring forward (02:30 on the day New York
///   or Berlin starts summer time) is **skipped**, not moved: `*-*-* 02:30` does not fire that day,
///   and `*:30` goes from 01:30 straight to 03:30.
/// - A reading that occurs twice because the clocks fall back fires **once, at its first
///   occurrence** (01:30 EDT, not 01:30 EST, in New York). This type applies that rule even when
///   asked from inside the repeated hour, where systemd would fire the second occurrence; a
///   stateless function that could fire twice would make a restarted driver repeat a job.
///
/// The search covers the years up to 2199, so ``nextFire(after:)`` always terminates; it returns
/// `nil` when nothing matches before then.
public struct CalendarSchedule: Sendable, Hashable, CustomStringConvertible {
    /// The zone whose wall clock the pattern is read in.
    public let timeZone: TimeZone
    /// The zone as the spec spelled it, `nil` when the default zone applies. Kept for
    /// ``description`` because Foundation reports `UTC` as `GMT`.
    let zoneName: String?
    let pattern: Pattern

    /// Parses e.g. "*-*-* 09:00:00", "Mon..Fri *-*-* 08:30", "daily", "hourly", "*:0/15",
    /// "2024-02-29 12:00 UTC", "*-*-01 00:00:00 Europe/Berlin".
    ///
    /// - Parameters:
    ///   - spec: the calendar expression.
    ///   - defaultTimeZone: the zone used when the spec names none.
    /// - Throws: ``EventBusError`` with code ``EventBusError/Code/invalidCalendarSpec`` and a message
    ///   naming the offending token and its position.
    public init(parsing spec: String, defaultTimeZone: TimeZone = .current) throws {
        self = try CalendarSpecParser(spec: spec).parse(defaultTimeZone: defaultTimeZone)
    }

    init(timeZone: TimeZone, zoneName: String?, pattern: Pattern) {
        self.timeZone = timeZone
        self.zoneName = zoneName
        self.pattern = pattern
    }

    /// The first fire time strictly after `date`, or nil if the schedule never fires again (e.g. a past fixed date).
    ///
    /// Fire times are whole seconds. The search jumps field by field through wall-clock readings
    /// (a year, month or day that cannot match is passed over whole), then maps the reading to an
    /// instant, skipping past a spring-forward gap or a fall-back repeat as one step.
    public func nextFire(after date: Date) -> Date? {
        // Clamped so the conversion to Int cannot trap; ±10¹² s is far outside 1970…2199 anyway.
        let after = Int(max(-1e12, min(1e12, date.timeIntervalSince1970.rounded(.down))))
        var reading = after + offset(at: after) + 1
        // Every pass either returns or moves `reading` past the reading it rejected, and
        // `pattern.firstReading` gives up after 2199, so this loop ends.
        while let candidate = pattern.firstReading(atOrAfter: reading) {
            switch landing(of: candidate) {
            case let .gap(resumeAt):
                reading = resumeAt
            case let .exists(firstInstant, periodEnd):
                if firstInstant > after { return Date(timeIntervalSince1970: TimeInterval(firstInstant)) }
                // Only a fall-back repeat gets here: the reading came round again after `date`, but
                // its first occurrence is already past. Every reading up to the end of that
                // occurrence's offset period is such a repeat.
                reading = periodEnd
            }
        }
        return nil
    }

    /// Normalized form, like `systemd-analyze calendar` prints ("*-*-* 09:00:00"), plus the zone when not the default.
    ///
    /// "Not the default" means the spec named a zone; it is then printed even if it equals the
    /// default, so the form parses back to the same schedule whatever default the reader uses.
    public var description: String {
        [pattern.description, zoneName].compactMap { $0 }.joined(separator: " ")
    }

    // MARK: - Wall-clock readings and instants

    /// Where a wall-clock reading (seconds since 1970-01-01 00:00 on the local clock) falls on the time line.
    private enum Landing {
        /// The reading exists; `firstInstant` is its first occurrence, and the offset in effect
        /// there lasts until the clock reads `periodEnd` (`Int.max` if it never changes again).
        case exists(firstInstant: Int, periodEnd: Int)
        /// The clock jumps over the reading; `resumeAt` is the reading right after the jump.
        case gap(resumeAt: Int)
    }

    private func offset(at instant: Int) -> Int {
        timeZone.secondsFromGMT(for: Date(timeIntervalSince1970: TimeInterval(instant)))
    }

    /// Walks the zone's offset periods from a day before `reading` (no UTC offset reaches a day, so
    /// no occurrence is earlier) and returns the first period whose wall-clock span contains it.
    /// Each period shows the readings `[start + offset, end + offset)`; a reading below the next
    /// period's span that no earlier period showed lies in a gap.
    private func landing(of reading: Int) -> Landing {
        var start = reading - 86_400
        var offset = offset(at: start)
        while true {
            if reading < start + offset { return .gap(resumeAt: start + offset) }
            let transition = timeZone.nextDaylightSavingTimeTransition(after: Date(timeIntervalSince1970: TimeInterval(start)))
            guard let end = transition.map({ Int($0.timeIntervalSince1970) }) else {
                return .exists(firstInstant: reading - offset, periodEnd: .max)
            }
            if reading < end + offset { return .exists(firstInstant: reading - offset, periodEnd: end + offset) }
            start = end
            offset = self.offset(at: end)
        }
    }
}

// MARK: - The wall-clock pattern

extension CalendarSchedule {
    /// The zone-free part of a schedule: which wall-clock readings match. Readings are seconds
    /// since 1970-01-01 00:00 on the local clock, split into civil fields with plain proleptic
    /// Gregorian arithmetic, because Foundation's `Calendar` would apply a zone's DST rules to what
    /// must stay a bare clock reading until ``CalendarSchedule/nextFire(after:)`` maps it.
    struct Pattern: Hashable, Sendable, CustomStringConvertible {
        var weekdays: Weekdays
        var year, month, day, hour, minute, second: Component

        /// The smallest matching reading `>= reading`, or nil if none comes before 2200.
        ///
        /// Finds the first acceptable value of each field in turn, from year down to second; when a
        /// field has none left, it carries into the field above and resets the ones below, so a
        /// search skips whole years, months or days rather than stepping through them.
        func firstReading(atOrAfter reading: Int) -> Int? {
            let days = reading.floorDivided(by: 86_400)
            let secondOfDay = reading - days * 86_400
            var (y, mo, d) = Civil.date(fromDays: days)
            var (h, mi, s) = (secondOfDay / 3600, secondOfDay / 60 % 60, secondOfDay % 60)
            while true {
                guard let nextYear = year.first(atOrAfter: y, in: .year) else { return nil }
                if nextYear != y { (y, mo, d, h, mi, s) = (nextYear, 1, 1, 0, 0, 0) }
                guard let nextMonth = month.first(atOrAfter: mo, in: .month) else {
                    (y, mo, d, h, mi, s) = (y + 1, 1, 1, 0, 0, 0)
                    continue
                }
                if nextMonth != mo { (mo, d, h, mi, s) = (nextMonth, 1, 0, 0, 0) }
                guard let nextDay = firstDay(atOrAfter: d, year: y, month: mo) else {
                    (mo, d, h, mi, s) = (mo + 1, 1, 0, 0, 0)
                    continue
                }
                if nextDay != d { (d, h, mi, s) = (nextDay, 0, 0, 0) }
                guard let nextHour = hour.first(atOrAfter: h, in: .hour) else {
                    (d, h, mi, s) = (d + 1, 0, 0, 0)
                    continue
                }
                if nextHour != h { (h, mi, s) = (nextHour, 0, 0) }
                guard let nextMinute = minute.first(atOrAfter: mi, in: .minute) else {
                    (h, mi, s) = (h + 1, 0, 0)
                    continue
                }
                if nextMinute != mi { (mi, s) = (nextMinute, 0) }
                guard let nextSecond = second.first(atOrAfter: s, in: .second) else {
                    (mi, s) = (mi + 1, 0)
                    continue
                }
                return Civil.days(year: y, month: mo, day: d) * 86_400 + h * 3600 + mi * 60 + nextSecond
            }
        }

        /// The first day `>= day` of the month that the day component, the month's length and the weekdays all allow.
        private func firstDay(atOrAfter day: Int, year: Int, month: Int) -> Int? {
            let length = Civil.daysIn(month: month, year: year)
            var candidate = day
            while let d = self.day.first(atOrAfter: candidate, in: .day), d <= length {
                if weekdays.contains(Civil.weekday(ofDays: Civil.days(year: year, month: month, day: d))) { return d }
                candidate = d + 1
            }
            return nil
        }

        var description: String {
            let date = "\(year.format(.year))-\(month.format(.month))-\(day.format(.day))"
            let time = "\(hour.format(.hour)):\(minute.format(.minute)):\(second.format(.second))"
            return [weekdays == .all ? nil : weekdays.description, date, time].compactMap { $0 }.joined(separator: " ")
        }
    }

    /// A date or time field: its name (for messages), bounds and printed width.
    enum Field: Sendable {
        case year, month, day, hour, minute, second

        var bounds: ClosedRange<Int> {
            switch self {
            case .year: 1970...2199
            case .month: 1...12
            case .day: 1...31
            case .hour: 0...23
            case .minute, .second: 0...59
            }
        }

        var width: Int { self == .year ? 4 : 2 }
    }

    /// One field of the pattern: `*` (no items) or a list of items, kept sorted and without
    /// duplicates so that equal specs compare and print equal.
    struct Component: Hashable, Sendable {
        /// A number (`first == last`, step 1), a range (step 1), a repetition (`last == nil`: up to
        /// the field's maximum) or a stepped range, whose `last` is trimmed to the last value it hits.
        struct Item: Hashable, Sendable {
            var first: Int
            var last: Int?
            var step: Int

            func first(atOrAfter value: Int, in field: Field) -> Int? {
                guard value > first else { return first }
                let last = self.last ?? field.bounds.upperBound
                let steps = (value - first + step - 1) / step
                let candidate = first + steps * step
                return candidate <= last ? candidate : nil
            }

            /// The order systemd prints a list in: by start, then numbers, repetitions, ranges, stepped ranges.
            var sortKey: (Int, Int, Int) {
                if last == first { return (first, -1, 0) }
                return (first, last ?? -1, step)
            }

            func format(_ field: Field) -> String {
                let start = pad(first, field)
                guard let last else { return "\(start)/\(step)" }
                if last == first { return start }
                return step == 1 ? "\(start)..\(pad(last, field))" : "\(start)..\(pad(last, field))/\(step)"
            }
        }

        static let any = Component(items: [])

        var items: [Item]

        func first(atOrAfter value: Int, in field: Field) -> Int? {
            if items.isEmpty {
                return value <= field.bounds.upperBound ? max(value, field.bounds.lowerBound) : nil
            }
            return items.compactMap { $0.first(atOrAfter: value, in: field) }.min()
        }

        func format(_ field: Field) -> String {
            items.isEmpty ? "*" : items.map { $0.format(field) }.joined(separator: ",")
        }
    }

    /// A set of weekdays, bit 0 = Monday, the way systemd counts them.
    struct Weekdays: Hashable, Sendable, CustomStringConvertible {
        static let names = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
        static let all = Weekdays(mask: 0x7F)

        var mask: UInt8

        func contains(_ weekday: Int) -> Bool { mask & (1 << weekday) != 0 }

        /// Runs of three or more days print as a range (`Mon..Wed`), shorter ones as a list (`Sat,Sun`), like systemd.
        var description: String {
            var parts: [String] = []
            var day = 0
            while day < 7 {
                guard contains(day) else { day += 1; continue }
                var end = day
                while end + 1 < 7, contains(end + 1) { end += 1 }
                if end - day >= 2 {
                    parts.append("\(Self.names[day])..\(Self.names[end])")
                } else {
                    parts += Self.names[day...end]
                }
                day = end + 1
            }
            return parts.joined(separator: ",")
        }
    }
}

private func pad(_ value: Int, _ field: CalendarSchedule.Field) -> String {
    let digits = String(value)
    return String(repeating: "0", count: max(0, field.width - digits.count)) + digits
}

/// Proleptic Gregorian calendar arithmetic on day numbers (days since 1970-01-01), after Howard
/// Hinnant's `days_from_civil` / `civil_from_days`.
private enum Civil {
    static func days(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = y.floorDivided(by: 400)
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func date(fromDays days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = z.floorDivided(by: 146_097)
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// 0 = Monday; 1970-01-01 was a Thursday.
    static func weekday(ofDays days: Int) -> Int {
        (days + 3).floorModulo(7)
    }

    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }
}

private extension Int {
    func floorDivided(by divisor: Int) -> Int {
        let quotient = self / divisor
        return self % divisor < 0 ? quotient - 1 : quotient
    }

    func floorModulo(_ divisor: Int) -> Int {
        self - floorDivided(by: divisor) * divisor
    }
}
