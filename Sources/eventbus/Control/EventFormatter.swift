import ControlProtocol
import Glibc

/// Turns the protocol's event and gap lines into lines for people, in the manner of
/// `journalctl -f`:
///
///     Mar 05 14:02:11.123 #1234 user.deploy.done (user) env=prod version=1.4.2
///     Mar 05 14:02:12.501 #1240 journal.entry (journal:unit ssh.service) unit=ssh.service: Accepted key for root
///     Mar 05 14:02:12.730 #1241 deploy.done (user) from web-1#88 version=1.4.2
///     -- 12 events dropped (#1241-#1252): this tail did not keep up --
///
/// Local time with milliseconds, the bus sequence number (what `--since` takes), the name, the
/// source, then the fields in key order — a `message` field last, without its key. Colour only
/// when standard output is a terminal and `NO_COLOR` is unset.
struct EventFormatter {
    let colour: Bool

    static func wantsColour() -> Bool {
        isatty(STDOUT_FILENO) == 1 && (getenv("NO_COLOR").map { $0.pointee == 0 } ?? true)
    }

    func format(_ line: JSON) -> String {
        if line["type"]?.stringValue == "gap" { return gap(line) }
        let sequence = line["seq"]?.intValue ?? 0
        let name = line["name"]?.stringValue ?? "?"
        let source = line["source"]?.stringValue ?? "?"
        let fields = line["fields"]?.objectValue ?? [:]
        var text = paint(Self.localTime(line["time"]?.stringValue ?? ""), "2") + " " + paint("#\(sequence)", "2") + " "
        text += paint(name, "1;36") + " " + paint("(\(source))", "2")
        // An event imported through the NATS bridge: where it came from, instead of its three
        // reserved origin fields.
        if let origin = fields["@origin.host"]?.stringValue {
            text += " " + paint("from \(origin)#\(fields["@origin.seq"]?.intValue ?? 0)", "35")
        }
        for key in fields.keys.sorted() where key != "message" && !key.hasPrefix("@origin.") {
            text += " " + key + "=" + Self.show(fields[key]!)
        }
        if let message = fields["message"] {
            let shown = message.stringValue ?? Self.show(message)
            text += ": " + paint(shown, Self.priorityColour(fields["priority"]?.intValue))
        }
        return text + "\n"
    }

    private func gap(_ line: JSON) -> String {
        let dropped = line["dropped"]?.intValue ?? 0
        let first = line["first_seq"]?.intValue ?? 0
        let last = line["last_seq"]?.intValue ?? 0
        let range = first == last ? "#\(first)" : "#\(first)-#\(last)"
        let text: String
        if line["reason"]?.stringValue == "replay" {
            text = "-- \(dropped) event(s) before the replay are no longer held by eventbusd (\(range)) --"
        } else {
            text = "-- \(dropped) event(s) dropped (\(range)): this tail did not keep up --"
        }
        return paint(text, "1;33") + "\n"
    }

    private func paint(_ text: String, _ code: String) -> String {
        guard colour, !code.isEmpty else { return text }
        return "\u{1B}[\(code)m\(text)\u{1B}[0m"
    }

    /// Journal priorities 0-3 (emerg … err) in red, 4 (warning) in yellow, as journalctl does.
    private static func priorityColour(_ priority: Int64?) -> String {
        guard let priority else { return "" }
        if priority <= 3 { return "1;31" }
        if priority == 4 { return "33" }
        return ""
    }

    /// A field value: strings bare unless they hold spaces, `=` or quotes (then quoted).
    private static func show(_ value: JSON) -> String {
        switch value {
        case .string(let text):
            if text.isEmpty || text.contains(where: { $0 == " " || $0 == "=" || $0 == "\"" || $0.isNewline }) {
                var writer = JSONWriter()
                writer.string(text)
                return String(decoding: writer.bytes, as: UTF8.self)
            }
            return text
        case .int(let number): return String(number)
        case .double(let number): return String(number)
        case .bool(let flag): return String(flag)
        default:
            var writer = JSONWriter()
            writer.value(value)
            return String(decoding: writer.bytes, as: UTF8.self)
        }
    }

    /// `2025-03-05T14:02:11.123456Z` → `Mar 05 14:02:11.123` in the local time zone.
    static func localTime(_ utc: String) -> String {
        let bytes = Array(utc.utf8)
        guard bytes.count >= 23 else { return utc }
        func number(_ range: Range<Int>) -> Int32 {
            Int32(String(decoding: bytes[range], as: UTF8.self)) ?? 0
        }
        var parts = tm()
        parts.tm_year = number(0..<4) - 1900
        parts.tm_mon = number(5..<7) - 1
        parts.tm_mday = number(8..<10)
        parts.tm_hour = number(11..<13)
        parts.tm_min = number(14..<16)
        parts.tm_sec = number(17..<19)
        var seconds = timegm(&parts)
        var local = tm()
        localtime_r(&seconds, &local)
        var text = [CChar](repeating: 0, count: 32)
        let length = strftime(&text, text.count, "%b %d %H:%M:%S", &local)
        return String(decoding: text[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self) + "." + String(decoding: bytes[20..<23], as: UTF8.self)
    }
}
