import CSystemd
import Foundation

/// The last lines a transient unit wrote, read from the journal (its standard output and error
/// go there, `StandardOutput=journal`): best effort and bounded.
///
/// journald reads a unit's output from a stream socket, so the last lines may reach the journal
/// shortly after systemd reports the unit ended. The read waits for them: it reads again
/// whenever the journal changes (any entry, not only the unit's), and stops once it has been
/// quiet for 300 ms after a line was found (1 s when none was: a silent command costs that), or
/// after 2 s in all — on a busy journal, that bound.
///
/// Matched by `_SYSTEMD_UNIT=` (each run's unit has a name of its own, so no invocation id is
/// needed); systemd's own messages about the unit (`Started …`) carry `UNIT=` instead and are
/// not part of it. When the journal cannot be read (eventbusd not in the `systemd-journal`
/// group, no journal files) the tail is empty: the outcome is the same, only without lines.
enum UnitJournalTail {
    /// Longest line kept, in bytes (cut at a character boundary and marked with `…`): the
    /// child-process launcher's bound, so a rule's tail reads the same either way.
    static let lineLimit = 512

    static func read(unit: String, lines: Int) -> [String] {
        guard lines > 0 else { return [] }
        var journal: OpaquePointer?
        guard sd_journal_open(&journal, Int32(SD_JOURNAL_LOCAL_ONLY | SD_JOURNAL_SYSTEM)) >= 0, let journal else { return [] }
        defer { sd_journal_close(journal) }
        guard sd_journal_add_match(journal, "_SYSTEMD_UNIT=\(unit)", 0) >= 0 else { return [] }
        // The inotify watch first: a line written between the first read and the first wait
        // must wake the wait.
        guard sd_journal_get_fd(journal) >= 0 else { return lastLines(journal, lines) }
        let start = ContinuousClock.now
        var tail = lastLines(journal, lines)
        while ContinuousClock.now - start < .seconds(2) {
            // NOP after 300 ms: nothing new arrived (APPEND, INVALIDATE: read again). With no
            // line yet, the quiet may be journald not having read the stream yet: wait on, up
            // to 1 s, before taking the command for a silent one.
            let change = sd_journal_wait(journal, 300_000)
            if change < 0 || (change == SD_JOURNAL_NOP && (!tail.isEmpty || ContinuousClock.now - start > .seconds(1))) { break }
            if change != SD_JOURNAL_NOP { tail = lastLines(journal, lines) }
        }
        return tail
    }

    private static func lastLines(_ journal: OpaquePointer, _ count: Int) -> [String] {
        guard sd_journal_seek_tail(journal) >= 0 else { return [] }
        var lines: [String] = []
        while lines.count < count, sd_journal_previous(journal) > 0 {
            var data: UnsafeRawPointer?
            var length = 0
            guard sd_journal_get_data(journal, "MESSAGE", &data, &length) >= 0, let data else { continue }
            let field = UnsafeRawBufferPointer(start: data, count: length).dropFirst("MESSAGE=".utf8.count)
            var line = String(decoding: field, as: UTF8.self)
            if line.utf8.count > lineLimit { line = cut(line) + "…" }
            lines.append(line)
        }
        return lines.reversed()
    }

    /// `line` cut to at most ``lineLimit`` bytes, at a character boundary.
    private static func cut(_ line: String) -> String {
        var end = lineLimit
        while end > 0 {
            if let text = String(line.utf8.prefix(end)) { return text }
            end -= 1
        }
        return ""
    }
}
