import EventBusKit
import Foundation
import Testing

// Every expected instant below is written in UTC and was checked against `systemd-analyze calendar
// --base-time=…` (systemd 252), except where a test says it deliberately differs. Each schedule
// is parsed with an explicit zone, so nothing depends on the machine's zone.

private let utcZone = TimeZone(identifier: "UTC")!
private let newYork = TimeZone(identifier: "America/New_York")!
private let berlin = TimeZone(identifier: "Europe/Berlin")!

/// "2026-01-01 09:30:00" (or without seconds) read as UTC.
private func utc(_ text: String) -> Date {
    let numbers = text.split(whereSeparator: { "- :".contains($0) }).map { Int($0)! }
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = utcZone
    let components = DateComponents(year: numbers[0], month: numbers[1], day: numbers[2],
                                    hour: numbers[3], minute: numbers[4], second: numbers.count > 5 ? numbers[5] : 0)
    return calendar.date(from: components)!
}

/// The next `count` fire times after `start`, each found from the previous one, the way a timer driver chains them.
private func fires(_ spec: String, in zone: TimeZone = utcZone, after start: String, count: Int) throws -> [Date] {
    let schedule = try CalendarSchedule(parsing: spec, defaultTimeZone: zone)
    var result: [Date] = []
    var date = utc(start)
    while result.count < count, let next = schedule.nextFire(after: date) {
        result.append(next)
        date = next
    }
    return result
}

@Suite struct CalendarScheduleTests {
    // MARK: Normalized form

    @Test(arguments: [
        ("*-*-* 09:00:00", "*-*-* 09:00:00"),
        ("Mon..Fri *-*-* 08:30", "Mon..Fri *-*-* 08:30:00"),
        ("minutely", "*-*-* *:*:00"),
        ("hourly", "*-*-* *:00:00"),
        ("daily", "*-*-* 00:00:00"),
        ("DAILY", "*-*-* 00:00:00"),
        ("weekly", "Mon *-*-* 00:00:00"),
        ("monthly", "*-*-01 00:00:00"),
        ("quarterly", "*-01,04,07,10-01 00:00:00"),
        ("semiannually", "*-01,07-01 00:00:00"),
        ("yearly", "*-01-01 00:00:00"),
        ("annually", "*-01-01 00:00:00"),
        ("*:0/15", "*-*-* *:00/15:00"),
        ("*-*-1/2", "*-*-01/2 00:00:00"),
        ("*-1/2", "*-*-01/2 00:00:00"),
        ("9:0", "*-*-* 09:00:00"),
        ("12:00", "*-*-* 12:00:00"),
        ("Mon", "Mon *-*-* 00:00:00"),
        ("mon,TUE,wednesday,Fri", "Mon..Wed,Fri *-*-* 00:00:00"),
        ("Sat..Sun", "Sat,Sun *-*-* 00:00:00"),
        ("Mon..Tue,Thu", "Mon,Tue,Thu *-*-* 00:00:00"),
        ("Mon,Mon..Mon", "Mon *-*-* 00:00:00"),
        ("Mon..Sun 12:00", "*-*-* 12:00:00"),
        ("*-*-5,1", "*-*-01,05 00:00:00"),
        ("*-*-* 1,3,2,3:00", "*-*-* 01,02,03:00:00"),
        ("*-*-1..10/2", "*-*-01..09/2 00:00:00"),
        ("*-*-* 0..23/1:00", "*-*-* 00..23:00:00"),
        ("*-*-* 1..2/5:00", "*-*-* 01:00:00"),
        ("*-*-* 5/10,0:00", "*-*-* 00,05/10:00:00"),
        ("*-*-* 1/5,1..3:00", "*-*-* 01/5,01..03:00:00"),
        ("*-*-* *:*:*", "*-*-* *:*:*"),
        ("2024-1-1/3", "2024-01-01/3 00:00:00"),
        ("2024-02-29 12:00 UTC", "2024-02-29 12:00:00 UTC"),
        ("daily utc", "*-*-* 00:00:00 UTC"),
        ("*-*-01 00:00:00 Europe/Berlin", "*-*-01 00:00:00 Europe/Berlin"),
        ("Mon  *-*-*   8:30 America/New_York", "Mon *-*-* 08:30:00 America/New_York"),
    ])
    func normalizedForm(spec: String, normalized: String) throws {
        let schedule = try CalendarSchedule(parsing: spec, defaultTimeZone: berlin)
        #expect(schedule.description == normalized)
        // The normalized form is itself a spec for the same schedule.
        #expect(try CalendarSchedule(parsing: normalized, defaultTimeZone: berlin) == schedule)
    }

    @Test func equivalentSpellingsAreEqual() throws {
        let a = try CalendarSchedule(parsing: "Mon..Fri 8:30", defaultTimeZone: utcZone)
        let b = try CalendarSchedule(parsing: "mon,tue,wed,thu,friday *-*-* 08:30:00", defaultTimeZone: utcZone)
        #expect(a == b)
        #expect(a.hashValue == b.hashValue)
        #expect(try CalendarSchedule(parsing: "weekly", defaultTimeZone: utcZone)
            == CalendarSchedule(parsing: "Mon 00:00", defaultTimeZone: utcZone))
    }

    // MARK: Calendar arithmetic

    @Test func thirtyFirstFiresOnlyInLongMonths() throws {
        #expect(try fires("*-*-31", after: "2025-01-31 00:00", count: 5) == [
            utc("2025-03-31 00:00"), utc("2025-05-31 00:00"), utc("2025-07-31 00:00"),
            utc("2025-08-31 00:00"), utc("2025-10-31 00:00"),
        ])
        #expect(try fires("*-*-30 12:00", after: "2025-01-30 12:00", count: 2) == [
            utc("2025-03-30 12:00"), utc("2025-04-30 12:00"),
        ])
    }

    @Test func dailyRollsOverMonthEnds() throws {
        #expect(try fires("daily", after: "2025-02-28 00:00", count: 2) == [utc("2025-03-01 00:00"), utc("2025-03-02 00:00")])
        #expect(try fires("daily", after: "2024-02-28 00:00", count: 2) == [utc("2024-02-29 00:00"), utc("2024-03-01 00:00")])
    }

    @Test func leapDayFiresOnlyInLeapYears() throws {
        #expect(try fires("*-02-29", after: "2024-03-01 00:00", count: 1) == [utc("2028-02-29 00:00")])
        // 2100 is not a leap year (divisible by 100, not by 400).
        #expect(try fires("*-02-29", after: "2096-03-01 00:00", count: 2) == [utc("2104-02-29 00:00"), utc("2108-02-29 00:00")])
        // A Friday leap day comes every 28 years here: the search jumps years, not seconds.
        #expect(try fires("Fri *-02-29", after: "2026-01-01 00:00", count: 3) == [
            utc("2036-02-29 00:00"), utc("2064-02-29 00:00"), utc("2092-02-29 00:00"),
        ])
    }

    @Test func yearBoundary() throws {
        #expect(try fires("*-*-* 23:30", after: "2025-12-31 23:30", count: 1) == [utc("2026-01-01 23:30")])
        #expect(try fires("yearly", after: "2025-12-31 23:59:59", count: 2) == [utc("2026-01-01 00:00"), utc("2027-01-01 00:00")])
        #expect(try fires("hourly", after: "2025-12-31 23:00", count: 1) == [utc("2026-01-01 00:00")])
    }

    @Test func weekdayRange() throws {
        // 2026-01-02 is a Friday; 09:00 is past that day's 08:30.
        #expect(try fires("Mon..Fri *-*-* 08:30", after: "2026-01-02 09:00", count: 6) == [
            utc("2026-01-05 08:30"), utc("2026-01-06 08:30"), utc("2026-01-07 08:30"),
            utc("2026-01-08 08:30"), utc("2026-01-09 08:30"), utc("2026-01-12 08:30"),
        ])
        #expect(try fires("Sat,Sun", after: "2026-01-01 00:00", count: 3) == [
            utc("2026-01-03 00:00"), utc("2026-01-04 00:00"), utc("2026-01-10 00:00"),
        ])
    }

    @Test func weekdayAndDateMustBothMatch() throws {
        // Friday the 13th: February, March and November in 2026.
        #expect(try fires("Fri *-*-13", after: "2026-01-01 00:00", count: 3) == [
            utc("2026-02-13 00:00"), utc("2026-03-13 00:00"), utc("2026-11-13 00:00"),
        ])
    }

    @Test func repetitions() throws {
        #expect(try fires("*:0/15", after: "2026-01-01 00:00", count: 4) == [
            utc("2026-01-01 00:15"), utc("2026-01-01 00:30"), utc("2026-01-01 00:45"), utc("2026-01-01 01:00"),
        ])
        #expect(try fires("*-*-* *:*:0/20", after: "2026-01-01 00:00:30", count: 3) == [
            utc("2026-01-01 00:00:40"), utc("2026-01-01 00:01:00"), utc("2026-01-01 00:01:20"),
        ])
        // Days 1, 3, …, 31; January's 31st is followed by February's 1st.
        #expect(try fires("*-*-1/2", after: "2026-01-30 00:00", count: 3) == [
            utc("2026-01-31 00:00"), utc("2026-02-01 00:00"), utc("2026-02-03 00:00"),
        ])
        #expect(try fires("*-*-* 8..17/3:00", after: "2026-01-01 09:00", count: 4) == [
            utc("2026-01-01 11:00"), utc("2026-01-01 14:00"), utc("2026-01-01 17:00"), utc("2026-01-02 08:00"),
        ])
    }

    @Test func shorthands() throws {
        #expect(try fires("minutely", after: "2026-01-01 10:59:30", count: 2) == [utc("2026-01-01 11:00"), utc("2026-01-01 11:01")])
        #expect(try fires("hourly", after: "2026-01-01 10:59:59", count: 2) == [utc("2026-01-01 11:00"), utc("2026-01-01 12:00")])
        #expect(try fires("daily", after: "2026-01-01 00:00", count: 1) == [utc("2026-01-02 00:00")])
        // 2026-01-01 is a Thursday; weekly means Monday 00:00.
        #expect(try fires("weekly", after: "2026-01-01 00:00", count: 2) == [utc("2026-01-05 00:00"), utc("2026-01-12 00:00")])
        #expect(try fires("monthly", after: "2026-01-31 00:00", count: 2) == [utc("2026-02-01 00:00"), utc("2026-03-01 00:00")])
        #expect(try fires("quarterly", after: "2026-01-01 00:00", count: 2) == [utc("2026-04-01 00:00"), utc("2026-07-01 00:00")])
        #expect(try fires("semiannually", after: "2026-01-01 00:00", count: 2) == [utc("2026-07-01 00:00"), utc("2027-01-01 00:00")])
        #expect(try fires("annually", after: "2026-06-01 00:00", count: 1) == [utc("2027-01-01 00:00")])
    }

    @Test func strictlyAfterAndFractionalSeconds() throws {
        let schedule = try CalendarSchedule(parsing: "*:0/15", defaultTimeZone: utcZone)
        #expect(schedule.nextFire(after: utc("2026-01-01 00:15")) == utc("2026-01-01 00:30"))
        #expect(schedule.nextFire(after: utc("2026-01-01 00:15").addingTimeInterval(-0.5)) == utc("2026-01-01 00:15"))
        #expect(schedule.nextFire(after: utc("2026-01-01 00:15").addingTimeInterval(0.5)) == utc("2026-01-01 00:30"))
    }

    @Test func neverFiringAgain() throws {
        let leapNoon = try CalendarSchedule(parsing: "2024-02-29 12:00 UTC")
        #expect(leapNoon.nextFire(after: utc("2024-01-01 00:00")) == utc("2024-02-29 12:00"))
        #expect(leapNoon.nextFire(after: utc("2024-02-29 12:00")) == nil)
        #expect(leapNoon.nextFire(after: utc("2026-01-01 00:00")) == nil)
        // Valid syntax, but no February has a 30th: the bounded search gives up.
        #expect(try CalendarSchedule(parsing: "*-02-30", defaultTimeZone: utcZone).nextFire(after: utc("2026-01-01 00:00")) == nil)
        #expect(try CalendarSchedule(parsing: "Mon *-02-30 *:*:*", defaultTimeZone: berlin).nextFire(after: utc("1970-01-01 00:00")) == nil)
        // Years run 1970…2199, as in systemd; extreme dates neither trap nor search forever.
        let daily = try CalendarSchedule(parsing: "daily", defaultTimeZone: utcZone)
        #expect(daily.nextFire(after: .distantPast) == utc("1970-01-01 00:00"))
        #expect(daily.nextFire(after: .distantFuture) == nil)
        #expect(try fires("daily", after: "2199-12-30 12:00", count: 2) == [utc("2199-12-31 00:00")])
        #expect(try fires("2199-12-31 23:59:59", after: "1970-01-01 00:00", count: 2) == [utc("2199-12-31 23:59:59")])
    }

    // MARK: Time zones and daylight-saving changes

    @Test func namedZoneVersusUTC() throws {
        // Berlin is UTC+1 in winter, UTC+2 in summer.
        #expect(try fires("*-*-01 00:00:00 Europe/Berlin", after: "2026-11-21 00:00", count: 1) == [utc("2026-11-30 23:00")])
        #expect(try fires("*-*-01 00:00:00 Europe/Berlin", after: "2026-06-15 00:00", count: 1) == [utc("2026-06-30 22:00")])
        #expect(try fires("*-*-01 00:00:00 UTC", in: berlin, after: "2026-11-21 00:00", count: 1) == [utc("2026-12-01 00:00")])
        // The default zone applies only when the spec names none.
        let byDefault = try CalendarSchedule(parsing: "daily", defaultTimeZone: berlin)
        #expect(byDefault.timeZone == berlin)
        #expect(byDefault.description == "*-*-* 00:00:00")
        #expect(byDefault.nextFire(after: utc("2026-01-01 12:00")) == utc("2026-01-01 23:00"))
        let named = try CalendarSchedule(parsing: "daily UTC", defaultTimeZone: berlin)
        #expect(named.timeZone.secondsFromGMT(for: utc("2026-07-01 00:00")) == 0)
        #expect(named.nextFire(after: utc("2026-01-01 12:00")) == utc("2026-01-02 00:00"))
    }

    // New York, 2027-03-14: at 02:00 EST (07:00 UTC) clocks jump to 03:00 EDT.
    @Test func springForwardGapIsSkippedInNewYork() throws {
        #expect(try fires("*-*-* 02:30", in: newYork, after: "2027-03-13 00:00", count: 3) == [
            utc("2027-03-13 07:30"), // 02:30 EST
            utc("2027-03-15 06:30"), // 02:30 EDT; the 14th has no 02:30
            utc("2027-03-16 06:30"),
        ])
        #expect(try fires("*:30", in: newYork, after: "2027-03-14 05:00", count: 4) == [
            utc("2027-03-14 05:30"), utc("2027-03-14 06:30"), // 00:30, 01:30 EST
            utc("2027-03-14 07:30"), utc("2027-03-14 08:30"), // 03:30, 04:30 EDT
        ])
        // Every second: 01:59:59 EST is followed by 03:00:00 EDT, one real second later.
        #expect(try fires("*:*:*", in: newYork, after: "2027-03-14 06:59:59", count: 1) == [utc("2027-03-14 07:00")])
    }

    // Berlin, 2027-03-28: at 02:00 CET (01:00 UTC) clocks jump to 03:00 CEST.
    @Test func springForwardGapIsSkippedInBerlin() throws {
        #expect(try fires("*-*-* 02:30 Europe/Berlin", after: "2027-03-27 00:00", count: 3) == [
            utc("2027-03-27 01:30"), // 02:30 CET
            utc("2027-03-29 00:30"), // 02:30 CEST; the 28th has no 02:30
            utc("2027-03-30 00:30"),
        ])
    }

    // New York, 2027-11-07: at 02:00 EDT (06:00 UTC) clocks go back to 01:00 EST.
    @Test func fallBackRepeatFiresOnceInNewYork() throws {
        #expect(try fires("*-*-* 01:30", in: newYork, after: "2027-11-06 00:00", count: 4) == [
            utc("2027-11-06 05:30"), // 01:30 EDT
            utc("2027-11-07 05:30"), // 01:30 EDT, the first of the two
            utc("2027-11-08 06:30"), // 01:30 EST
            utc("2027-11-09 06:30"),
        ])
        #expect(try fires("*:0/20", in: newYork, after: "2027-11-07 04:00", count: 6) == [
            utc("2027-11-07 04:20"), utc("2027-11-07 04:40"), utc("2027-11-07 05:00"),
            utc("2027-11-07 05:20"), utc("2027-11-07 05:40"), // … 01:40 EDT
            utc("2027-11-07 07:00"), // 02:00 EST: 01:00–01:59 EST were already shown
        ])
    }

    // Berlin, 2027-10-31: at 03:00 CEST (01:00 UTC) clocks go back to 02:00 CET.
    @Test func fallBackRepeatFiresOnceInBerlin() throws {
        #expect(try fires("*-*-* 02:30 Europe/Berlin", after: "2027-10-30 00:00", count: 3) == [
            utc("2027-10-30 00:30"), // 02:30 CEST
            utc("2027-10-31 00:30"), // 02:30 CEST, the first of the two
            utc("2027-11-01 01:30"), // 02:30 CET
        ])
    }

    /// Deliberately unlike systemd 252, which from inside the repeated hour fires the second
    /// occurrence (06:30 and 01:30 UTC here): a repeated reading never fires twice.
    @Test func askedFromInsideTheRepeatedHourTheRepeatDoesNotFire() throws {
        // 06:10 UTC is 01:10 EST; 01:30 was shown at 05:30 UTC already.
        #expect(try fires("*:30", in: newYork, after: "2027-11-07 06:10", count: 1) == [utc("2027-11-07 07:30")])
        #expect(try fires("*:*:*", in: newYork, after: "2027-11-07 06:10", count: 1) == [utc("2027-11-07 07:00")])
        // 01:10 UTC is 02:10 CET; 02:30 was shown at 00:30 UTC already.
        #expect(try fires("*:30 Europe/Berlin", after: "2027-10-31 01:10", count: 1) == [utc("2027-10-31 02:30")])
    }

    // MARK: Errors

    @Test(arguments: [
        ("*-13-01", #"month "13" is out of range 1..12 at position 3 in "*-13-01""#),
        ("*-*-* 24:00", #"hour "24" is out of range 0..23 at position 7 in "*-*-* 24:00""#),
        ("*-*-* 00:00:60", #"second "60" is out of range 0..59 at position 13 in "*-*-* 00:00:60""#),
        ("*-*-0", #"day "0" is out of range 1..31 at position 5 in "*-*-0""#),
        ("99-01-01", #"year "99" is out of range 1970..2199 at position 1 in "99-01-01""#),
        ("*-*-* 08:00:00.5", #"fractional seconds "00.5" are not supported at position 13 in "*-*-* 08:00:00.5""#),
        ("*-*~1", #""~" (days counted from the end of the month) is not supported at position 4 in "*-*~1""#),
        ("*-*-* */15:00", #""*/15" is not supported; a repetition starts at a number, e.g. "0/15" at position 7 in "*-*-* */15:00""#),
        ("*-*-* 0/30:00", #"repetition "0/30" never repeats: the hour goes up to 23 at position 7 in "*-*-* 0/30:00""#),
        ("*-*-* 5/0:00", #"step "0" is not a whole number of at least 1 at position 9 in "*-*-* 5/0:00""#),
        ("*-*-* 10..8:00", #"hour range "10..8" runs backwards at position 7 in "*-*-* 10..8:00""#),
        ("Fri..Mon", #"weekday range "Fri..Mon" runs backwards (weeks run Monday to Sunday) at position 1 in "Fri..Mon""#),
        ("Mon,Tues 12:00", #"unknown weekday "Tues" at position 5 in "Mon,Tues 12:00""#),
        ("dialy", #""dialy" is neither a weekday nor a shorthand (annually, daily, hourly, minutely, monthly, quarterly, semiannually, weekly, yearly) at position 1 in "dialy""#),
        ("*-*-* 00:00 Mars/Olympus", #"unknown time zone "Mars/Olympus" at position 13 in "*-*-* 00:00 Mars/Olympus""#),
        ("12:00 Mon", #"weekdays "Mon" must come first at position 7 in "12:00 Mon""#),
        ("12:00 2024-01-01", #"the date "2024-01-01" must come before the time at position 7 in "12:00 2024-01-01""#),
        ("daily 12:00", #"only a time zone may follow the shorthand "daily", not "12:00" at position 7 in "daily 12:00""#),
        ("@1700000000", #""@1700000000" is neither a date (YYYY-MM-DD) nor a time (HH:MM[:SS]) at position 1 in "@1700000000""#),
        ("12::00", #"minute missing at position 4 in "12::00""#),
        ("2024-01-01-01", #"date "2024-01-01-01" is not YYYY-MM-DD or MM-DD at position 1 in "2024-01-01-01""#),
        ("1:2:3:4", #"time "1:2:3:4" is not HH:MM or HH:MM:SS at position 1 in "1:2:3:4""#),
        ("*-*-* +5:00", #"hour "+5" is not a number at position 7 in "*-*-* +5:00""#),
        ("*-*-1,,2", #"empty item in the day list at position 7 in "*-*-1,,2""#),
    ])
    func rejects(spec: String, message: String) {
        let error = #expect(throws: EventBusError.self) {
            try CalendarSchedule(parsing: spec, defaultTimeZone: utcZone)
        }
        #expect(error?.code == .invalidCalendarSpec)
        #expect(error?.message == message)
    }

    @Test func rejectsAnEmptySpec() {
        let error = #expect(throws: EventBusError.self) {
            try CalendarSchedule(parsing: "  ", defaultTimeZone: utcZone)
        }
        #expect(error?.code == .invalidCalendarSpec)
        #expect(error?.message == "the calendar spec is empty")
    }
}
