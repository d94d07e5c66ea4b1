import Foundation

/// When a timer fires, how precisely, and what to do about runs it missed.
public struct TimerSchedule: Sendable, Hashable, CustomStringConvertible {
    enum Kind: Sendable, Hashable {
        /// Every `interval` on `CLOCK_MONOTONIC`: clock changes do not move it and, as with
        /// systemd's monotonic timers, time spent suspended does not count.
        case interval(nanoseconds: UInt64)
        /// At wall-clock times; a suspend that spans one or more of them shows as missed runs.
        case calendar(CalendarSchedule)
    }

    let kind: Kind
    /// How late the system may fire to batch wake-ups (a timer's leeway). Not counted as missed.
    public let tolerance: Duration
    public let missedRuns: MissedRunPolicy
    /// A name its ticks carry (``TimerTick/name``): the host names each timer of
    /// `sources.timers` after its config entry, so a tail or a module can tell them apart.
    /// Timers with the same schedule and different names are different timers.
    public private(set) var name: String?

    /// The same schedule, its ticks carrying `name`.
    public func named(_ name: String) -> TimerSchedule {
        var named = self
        named.name = name
        return named
    }

    /// The schedule without its name: what ``TimerTick/schedule`` says.
    var unnamed: TimerSchedule {
        var copy = self
        copy.name = nil
        return copy
    }

    /// A timer every `interval` (at least 1 ms), starting one interval from the first subscription.
    public static func every(_ interval: Duration, tolerance: Duration = .zero,
                             missedRuns: MissedRunPolicy = .fireOnce) throws -> TimerSchedule {
        guard interval >= .milliseconds(1) else {
            throw EventBusError(.invalidTimerInterval, "timer interval \(interval) is below the 1 ms minimum")
        }
        return try TimerSchedule(kind: .interval(nanoseconds: UInt64(interval.clampedNanoseconds)),
                                 tolerance: tolerance, missedRuns: missedRuns)
    }

    /// A timer at the times of a calendar expression (see ``CalendarSchedule`` for the syntax).
    public static func calendar(_ spec: String, timeZone: TimeZone = .current, tolerance: Duration = .zero,
                                missedRuns: MissedRunPolicy = .fireOnce) throws -> TimerSchedule {
        try TimerSchedule(kind: .calendar(CalendarSchedule(parsing: spec, defaultTimeZone: timeZone)),
                          tolerance: tolerance, missedRuns: missedRuns)
    }

    private init(kind: Kind, tolerance: Duration, missedRuns: MissedRunPolicy) throws {
        guard tolerance >= .zero else {
            throw EventBusError(.invalidTimerInterval, "timer tolerance \(tolerance) is negative")
        }
        self.kind = kind
        self.tolerance = tolerance
        self.missedRuns = missedRuns
    }

    /// Also the timer's source id: two subscriptions with equal descriptions share one timer.
    public var description: String {
        var text: String
        switch kind {
        case .interval(let nanoseconds): text = "every \(Duration.nanoseconds(Int64(nanoseconds)))"
        case .calendar(let calendar): text = "calendar \(calendar)"
        }
        if tolerance > .zero { text += " tolerance \(tolerance)" }
        if missedRuns != .fireOnce { text += " missed \(missedRuns)" }
        if let name { text += " name \(name)" }
        return text
    }
}

/// What a timer does when it wakes up a whole period (or more) late: after a suspend, a clock
/// jump, or a stalled process.
public enum MissedRunPolicy: String, Sendable, Hashable, CaseIterable {
    /// Fire once now for all the runs that were due, with their number in ``TimerTick/missedRuns``
    /// (like systemd's `Persistent=true`), then keep to the schedule.
    case fireOnce = "fire-once"
    /// Drop the runs that were due and wait for the next scheduled time; that tick reports how
    /// many were skipped in ``TimerTick/missedRuns``.
    case skip
}


@_spi(EventBusHost) extension TimerSchedule {
    /// The interval of an `every` schedule, in nanoseconds; nil for a calendar one.
    public var intervalNanoseconds: UInt64? {
        if case .interval(let nanoseconds) = kind { return nanoseconds }
        return nil
    }

    /// The calendar of a `calendar` schedule; nil for an interval.
    public var calendar: CalendarSchedule? {
        if case .calendar(let calendar) = kind { return calendar }
        return nil
    }
}
