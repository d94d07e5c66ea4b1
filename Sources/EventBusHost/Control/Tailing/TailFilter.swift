import EventBusKit
import Foundation

/// What a tail asked for beyond event names: journalctl-style field matches and a time window.
///
/// Matches follow `journalctl FIELD=VALUE`: values given for the same field are alternatives
/// (OR), different fields must all match (AND), and all of it is ANDed with the name patterns.
/// A value is compared with the field's text (`n=3` matches the int 3, `ok=true` the bool), or
/// matched as a glob when it holds `*` or `?` (``FieldMatch``); an event without the field does
/// not match. The host applies the filter before an event enters
/// the client's buffer, so a narrow tail over a busy bus costs no socket traffic and never drops
/// events it did not want.
struct TailFilter: Sendable {
    /// Field name → the texts and globs it accepts.
    var matches: [String: FieldMatch] = [:]
    /// Events posted before this wall-clock time are not wanted (`since_time`).
    var since: Date?
    /// The stream ends at the first event posted after this time (`until_time`).
    var until: Date?
    /// The stream ends at the first event after this sequence (`until_seq`).
    var untilSequence: UInt64?

    var isEmpty: Bool { matches.isEmpty && since == nil }

    /// Whether `event` passes the field matches and the start of the window.
    @inline(__always)
    func accepts(_ event: Event) -> Bool {
        if let since, event.wallTime < since { return false }
        for (field, accepted) in matches {
            guard let value = event.fields[field], accepted.accepts(value.description) else { return false }
        }
        return true
    }

    /// Whether `event` lies beyond the end of the window: the stream ends before it.
    func endsBefore(_ event: Event) -> Bool {
        if let untilSequence, event.sequence > untilSequence { return true }
        if let until, event.wallTime > until { return true }
        return false
    }

    /// Whether every event from now on lies beyond the window: the stream ends after the replay.
    func hasEnded(newestSequence: UInt64, now: Date) -> Bool {
        if let untilSequence, untilSequence <= newestSequence { return true }
        if let until, until <= now { return true }
        return false
    }
}
