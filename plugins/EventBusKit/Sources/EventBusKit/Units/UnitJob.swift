/// A `unit.job` event: systemd queued a job for a unit (`JobNew`) or finished it (`JobRemoved`).
public struct UnitJob: Sendable, Hashable {
    public static let eventName = "unit.job"

    public enum Phase: String, Sendable, Hashable {
        /// Queued (`JobNew`).
        case queued
        /// Finished, with a ``UnitJob/result`` (`JobRemoved`).
        case finished
    }

    /// The unit the job is for.
    public var unit: String
    /// systemd's job number, the same in both events of one job.
    public var id: UInt32
    public var phase: Phase
    /// `JobType`: start, stop, restart, reload, verify-active, try-restart…, on
    /// ``Phase/finished``. The signals do not carry it, so the source asks the job when it is
    /// queued and posts the `queued` event at once, without it (a transition never waits for
    /// the answer). nil too when the job was gone before systemd read the question (a job that
    /// finished within the same turn of systemd's loop).
    public var type: String?
    /// For ``Phase/finished``: done, canceled, timeout, failed, dependency, skipped, invalid,
    /// assert, unsupported, collected, once.
    public var result: String?

    public init(unit: String, id: UInt32, phase: Phase, type: String?, result: String?) {
        self.unit = unit
        self.id = id
        self.phase = phase
        self.type = type
        self.result = result
    }

    public func event(source: String) -> Event {
        var fields: [String: FieldValue] = ["unit": .string(unit), "job_id": .int(Int64(id)), "phase": .string(phase.rawValue)]
        if let type { fields["job_type"] = .string(type) }
        if let result { fields["result"] = .string(result) }
        return Event(name: Self.eventName, source: source, fields: fields)
    }
}

extension Event {
    /// The unit job this event carries, if it is a `unit.job` event.
    public var unitJob: UnitJob? {
        guard name == UnitJob.eventName, let unit = fields["unit"]?.stringValue,
              let id = fields["job_id"]?.intValue, let phase = fields["phase"]?.stringValue.flatMap(UnitJob.Phase.init(rawValue:))
        else { return nil }
        return UnitJob(unit: unit, id: UInt32(clamping: id), phase: phase, type: fields["job_type"]?.stringValue,
                       result: fields["result"]?.stringValue)
    }
}
