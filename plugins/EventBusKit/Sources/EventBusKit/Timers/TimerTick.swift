import Foundation

/// A timer's firing, as module code reads it from a `timer.tick` event.
public struct TimerTick: Sendable, Hashable {
    public static let eventName = "timer.tick"

    /// The schedule, as in ``TimerSchedule/description`` without the name.
    public var schedule: String
    /// The timer's name (``TimerSchedule/named(_:)``; a config timer's `name`), as the field
    /// `timer`; nil for an unnamed timer.
    public var name: String?
    /// When this run was due, and when it actually fired: the difference is the jitter.
    public var scheduled: Date
    public var fired: Date
    /// `fired - scheduled` on the timer's own clock (monotonic for intervals), in nanoseconds.
    public var latenessNanoseconds: Int64
    /// Runs that did not fire separately before this one (see ``MissedRunPolicy``).
    public var missedRuns: Int

    var fields: [String: FieldValue] {
        var fields: [String: FieldValue] = [
            "schedule": .string(schedule),
            "scheduled": .date(scheduled),
            "fired": .date(fired),
            "lateness_ns": .int(latenessNanoseconds),
            "missed_runs": .int(Int64(missedRuns)),
        ]
        if let name { fields["timer"] = .string(name) }
        return fields
    }
}

extension Event {
    /// The timer tick this event carries, if it is one.
    public var timerTick: TimerTick? {
        guard name == TimerTick.eventName,
              let schedule = fields["schedule"]?.stringValue,
              let scheduled = fields["scheduled"]?.dateValue,
              let fired = fields["fired"]?.dateValue,
              let lateness = fields["lateness_ns"]?.intValue,
              let missed = fields["missed_runs"]?.intValue
        else { return nil }
        return TimerTick(schedule: schedule, name: fields["timer"]?.stringValue, scheduled: scheduled, fired: fired,
                         latenessNanoseconds: lateness, missedRuns: Int(missed))
    }
}
