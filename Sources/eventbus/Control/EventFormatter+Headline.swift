import ControlProtocol
import Glibc

/// What a person looks for in the events whose whole line is long — the default tail line
/// (``EventFormatter/format(_:)``) shows only this after the time and number, the rest is in
/// `-o verbose` and `-o json`.
///
/// Why: a journal entry carries its cursor, boot id, both clocks and the source's description
/// (a line of ~450 characters against `journalctl -f`'s ~90), a unit state both states in full
/// (~530). These kinds put the subject and the change first, as journalctl and systemctl do.
extension EventFormatter {
    /// The headline of an event of a known kind (nil for any other: it is shown whole).
    ///
    /// - `journal.entry`: `IDENTIFIER[PID]: MESSAGE` (the unit when there is no identifier), the
    ///   message coloured by priority;
    /// - `unit.state`: `UNIT: OLD → NEW` (`active/running`), the result and exit status when it
    ///   failed, `(snapshot)` or `(resync)` when it is not a transition seen live;
    /// - `unit.job`: `UNIT: TYPE job ID queued` / `finished: RESULT`;
    /// - `fs.created`, `modified`, `closed`, `deleted`, `attributes`, `moved`: `PATH: CHANGE`
    ///   (`OLD → NEW: moved`);
    /// - `device.*`: `SUBSYSTEM/SYSNAME: ACTION` and the device node.
    func headline(name: String, fields: [String: JSON]) -> String? {
        func text(_ key: String) -> String? { fields[key].map { $0.stringValue.map(Self.escape) ?? Self.show($0) } }
        switch name {
        case "journal.entry":
            guard let message = text("message") else { return nil }
            let who = text("identifier") ?? text("unit") ?? "journal"
            let pid = fields["pid"]?.intValue.map { "[\($0)]" } ?? ""
            return paint(who + pid + ":", "1") + " " + paint(message, Self.priorityColour(fields["priority"]?.intValue))
        case "unit.state":
            guard let unit = text("unit"), let active = text("active_state"), let sub = text("sub_state") else { return nil }
            var line = paint(unit + ":", "1") + " "
            if let oldActive = text("old_active_state"), let oldSub = text("old_sub_state") {
                line += "\(oldActive)/\(oldSub) → "
            }
            line += paint("\(active)/\(sub)", active == "failed" ? "1;31" : "")
            var notes: [String] = []
            if let result = text("result"), result != "success" { notes.append(result) }
            if let status = fields["exec_main_status"]?.intValue, status != 0 || active == "failed" { notes.append("status \(status)") }
            if let origin = text("origin"), origin != "change" { notes.append(origin) }
            return line + (notes.isEmpty ? "" : " (" + notes.joined(separator: ", ") + ")")
        case "unit.job":
            guard let unit = text("unit"), let phase = text("phase") else { return nil }
            let job = [text("job_type"), "job", fields["job_id"]?.intValue.map(String.init)].compactMap { $0 }.joined(separator: " ")
            return paint(unit + ":", "1") + " \(job) \(phase)" + (text("result").map { ": \($0)" } ?? "")
        case "fs.created", "fs.modified", "fs.closed", "fs.deleted", "fs.attributes", "fs.moved":
            guard let path = text("path") else { return nil }
            let subject = text("old_path").map { "\($0) → \(path)" } ?? path
            return paint(subject + ":", "1") + " " + name.dropFirst("fs.".count)
        case _ where name.hasPrefix("device."):
            guard let sysname = text("sysname") ?? text("syspath") else { return nil }
            let device = (text("subsystem").map { $0 + "/" } ?? "") + sysname
            return paint(device + ":", "1") + " " + name.dropFirst("device.".count) + (text("devnode").map { " \($0)" } ?? "")
        default:
            return nil
        }
    }

    /// Whether events named `name` may have a headline: the short line's fast path
    /// (``ShortLineWriter``) leaves them to ``format(_:)``.
    static func mayHaveHeadline(_ name: UnsafeBufferPointer<UInt8>) -> Bool {
        func starts(_ prefix: StaticString) -> Bool {
            name.count >= prefix.utf8CodeUnitCount && memcmp(name.baseAddress!, prefix.utf8Start, prefix.utf8CodeUnitCount) == 0
        }
        return starts("journal.entry") || starts("unit.") || starts("fs.") || starts("device.")
    }
}
