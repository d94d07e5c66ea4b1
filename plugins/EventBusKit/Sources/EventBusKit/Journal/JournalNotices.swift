/// A notice that the position a watch was asked to resume from is gone: the entry at the
/// cursor was rotated away and vacuumed (or the cursor is not from this journal). Entries
/// between it and where delivery resumes may be lost; delivery goes on with the oldest entry
/// still available after it. Comes before that entry, as a `journal.gap` event.
public struct JournalGap: Sendable, Hashable {
    public static let eventName = "journal.gap"

    /// The cursor delivery should have resumed after.
    public var lostCursor: String
    /// The first entry delivered instead (nil when the journal had no entry yet: delivery then
    /// starts with the next entry written).
    public var resumedCursor: String?
    /// How many journal sequence numbers lie strictly between the two cursors, when both come
    /// from one sequence (one journald writer): an upper bound on the lost entries, counting
    /// entries of every unit, not only matching ones. Nil when unknown.
    public var skippedSequenceNumbers: UInt64?

    public init(lostCursor: String, resumedCursor: String?, skippedSequenceNumbers: UInt64?) {
        self.lostCursor = lostCursor
        self.resumedCursor = resumedCursor
        self.skippedSequenceNumbers = skippedSequenceNumbers
    }

    public func event(source: String) -> Event {
        var fields: [String: FieldValue] = ["lost_cursor": .string(lostCursor)]
        if let resumedCursor { fields["resumed_cursor"] = .string(resumedCursor) }
        if let skippedSequenceNumbers { fields["skipped_seqnums"] = .int(Int64(clamping: skippedSequenceNumbers)) }
        return Event(name: Self.eventName, source: source, fields: fields)
    }
}

/// How a watch's reader is doing, as a `journal.status` event: posted when it starts following
/// and whenever that changes.
public struct JournalStatus: Sendable, Hashable {
    public static let eventName = "journal.status"

    public enum State: String, Sendable, Hashable {
        /// The journal is open and positioned: entries written from now on are delivered.
        case following
        /// There is no journal (no journald on this machine, no such directory or namespace) or
        /// reading it failed; the reader retries after ``JournalStatus/retryAfterSeconds``.
        case unavailable
        /// The watch cannot run at all (its consumer position is in use by another watch, or
        /// cannot be read); it does not retry.
        case failed
    }

    public var state: State
    /// Why, for people.
    public var reason: String
    /// For ``State/unavailable``: when the reader tries again.
    public var retryAfterSeconds: Double?

    public init(state: State, reason: String, retryAfterSeconds: Double? = nil) {
        self.state = state
        self.reason = reason
        self.retryAfterSeconds = retryAfterSeconds
    }

    public func event(source: String) -> Event {
        var fields: [String: FieldValue] = ["state": .string(state.rawValue), "reason": .string(reason)]
        if let retryAfterSeconds { fields["retry_after_s"] = .double(retryAfterSeconds) }
        return Event(name: Self.eventName, source: source, fields: fields)
    }
}

extension Event {
    /// The journal gap notice this event carries, if it is one.
    public var journalGap: JournalGap? {
        guard name == JournalGap.eventName, let lost = fields["lost_cursor"]?.stringValue else { return nil }
        return JournalGap(lostCursor: lost, resumedCursor: fields["resumed_cursor"]?.stringValue,
                          skippedSequenceNumbers: fields["skipped_seqnums"]?.intValue.map { UInt64($0) })
    }

    /// The journal status this event carries, if it is one.
    public var journalStatus: JournalStatus? {
        guard name == JournalStatus.eventName,
              let state = fields["state"]?.stringValue.flatMap(JournalStatus.State.init(rawValue:)),
              let reason = fields["reason"]?.stringValue
        else { return nil }
        return JournalStatus(state: state, reason: reason, retryAfterSeconds: fields["retry_after_s"]?.doubleValue)
    }
}
