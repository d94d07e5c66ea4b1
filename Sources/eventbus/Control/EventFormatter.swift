import ControlProtocol
import Glibc

/// Turns the protocol's event and gap lines into lines for people, in the manner of
/// `journalctl -f`:
///
///     Mar 05 14:02:11.123 #1234 user.deploy.done (user) env=prod version=1.4.2
///     Mar 05 14:02:12.501 #1240 sshd[812]: Accepted key for root
///     Mar 05 14:02:12.610 #1241 nginx.service: active/running → failed/failed (exit-code, status 1)
///     Mar 05 14:02:12.730 #1242 deploy.done (user) from web-1#88 version=1.4.2
///     -- 12 events dropped (#1241-#1252): this tail did not keep up --
///
/// Local time with milliseconds and the bus sequence number (what `--since` takes); then, for
/// the kinds whose whole line runs to hundreds of characters (journal entries, unit states and
/// jobs, file changes, devices), what a person looks for (``headline(name:fields:)``); for any
/// other event, and for every event with `-o verbose` (``verbose(_:)``), the name, the source
/// and the fields in key order — a `message` field last, without its key. Colour only when
/// standard output is a terminal and `NO_COLOR` is unset.
///
/// Terminal safety: names, sources, keys and values are posted by anyone allowed to post, so
/// their control characters are shown escaped, as `journalctl` does (`\x1b`, `\n`, `\t`, C1
/// controls as `\u{9b}`): a field cannot recolour or retitle the terminal, and a newline in it
/// cannot forge a line that looks like another event. `--json` stays exact (JSON escapes them).
struct EventFormatter {
    let colour: Bool
    /// Times in UTC rather than the local time zone (`--utc`).
    var utc = false

    static func wantsColour() -> Bool {
        isatty(STDOUT_FILENO) == 1 && (getenv("NO_COLOR").map { $0.pointee == 0 } ?? true)
    }

    /// The default line: the headline of a known kind, else the whole event as ``verbose(_:)``.
    func format(_ line: JSON) -> String {
        if line["type"]?.stringValue == "gap" { return gap(line) }
        let fields = line["fields"]?.objectValue ?? [:]
        // An imported event names its origin host: the whole line says it.
        guard fields["@origin.host"] == nil, let headline = headline(name: line["name"]?.stringValue ?? "", fields: fields) else {
            return verbose(line)
        }
        let sequence = line["seq"]?.intValue ?? 0
        return paint(Self.localTime(line["time"]?.stringValue ?? "", utc: utc), "2") + " " + paint("#\(sequence)", "2") + " "
            + headline + "\n"
    }

    /// Every part of the event: time, sequence number, name, source, each field.
    func verbose(_ line: JSON) -> String {
        if line["type"]?.stringValue == "gap" { return gap(line) }
        let sequence = line["seq"]?.intValue ?? 0
        let name = Self.escape(line["name"]?.stringValue ?? "?")
        let source = Self.escape(line["source"]?.stringValue ?? "?")
        let fields = line["fields"]?.objectValue ?? [:]
        var text = paint(Self.localTime(line["time"]?.stringValue ?? "", utc: utc), "2") + " " + paint("#\(sequence)", "2") + " "
        text += paint(name, "1;36") + " " + paint("(\(source))", "2")
        // An event imported through the NATS bridge: where it came from, instead of its three
        // reserved origin fields.
        if let origin = fields["@origin.host"]?.stringValue {
            text += " " + paint("from \(Self.escape(origin))#\(fields["@origin.seq"]?.intValue ?? 0)", "35")
        }
        for key in fields.keys.sorted() where key != "message" && !key.hasPrefix("@origin.") {
            text += " " + Self.escape(key) + "=" + Self.show(fields[key]!)
        }
        if let message = fields["message"] {
            let shown = message.stringValue.map(Self.escape) ?? Self.show(message)
            text += ": " + paint(shown, Self.priorityColour(fields["priority"]?.intValue))
        }
        return text + "\n"
    }

    /// `-o cat`: the `message` field alone, or the name when there is none; gaps as in ``format(_:)``.
    func cat(_ line: JSON) -> String {
        if line["type"]?.stringValue == "gap" { return gap(line) }
        let fields = line["fields"]?.objectValue ?? [:]
        // What the event is about when it says nothing in words: a file change's path.
        let subject = [fields["old_path"], fields["path"]].compactMap { $0?.stringValue }.joined(separator: " → ")
        let named = (line["name"]?.stringValue ?? "?") + (subject.isEmpty ? "" : " " + subject)
        let text = fields["message"].map { $0.stringValue ?? Self.show($0) } ?? named
        return Self.escape(text) + "\n"
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

    func paint(_ text: String, _ code: String) -> String {
        guard colour, !code.isEmpty else { return text }
        return "\u{1B}[\(code)m\(text)\u{1B}[0m"
    }

    /// Journal priorities 0-3 (emerg … err) in red, 4 (warning) in yellow, as journalctl does.
    static func priorityColour(_ priority: Int64?) -> String {
        guard let priority else { return "" }
        if priority <= 3 { return "1;31" }
        if priority == 4 { return "33" }
        return ""
    }

    /// A field value: strings bare unless they hold spaces, `=` or quotes (then quoted).
    static func show(_ value: JSON) -> String {
        switch value {
        case .string(let text):
            if text.isEmpty || text.contains(where: { $0 == " " || $0 == "=" || $0 == "\"" || $0.isNewline }) {
                var quoted = "\""
                for character in text { if character == "\"" { quoted += "\\\"" } else { quoted.append(character) } }
                return escape(quoted) + "\""
            }
            return escape(text)
        case .int(let number): return String(number)
        case .double(let number): return String(number)
        case .bool(let flag): return String(flag)
        default:
            var writer = JSONWriter()
            writer.value(value)
            return escape(String(decoding: writer.bytes, as: UTF8.self))
        }
    }

    /// `text` with every control character (C0, DEL, C1) written as an escape sequence.
    static func escape(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isControl) else { return text }
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count + 8)
        for scalar in text.unicodeScalars {
            guard isControl(scalar) else {
                escaped.unicodeScalars.append(scalar)
                continue
            }
            switch scalar {
            case "\n": escaped += "\\n"
            case "\t": escaped += "\\t"
            case "\r": escaped += "\\r"
            default:
                let hex = String(scalar.value, radix: 16)
                escaped += scalar.value < 0x80 ? "\\x" + (hex.count == 1 ? "0" : "") + hex : "\\u{" + hex + "}"
            }
        }
        return escaped
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// `2025-03-05T14:02:11.123456Z` → `Mar 05 14:02:11.123` in the local time zone (or in UTC).
    static func localTime(_ text: String, utc: Bool = false) -> String {
        let bytes = Array(text.utf8)
        guard bytes.count >= 23 else { return text }
        return clock(bytes[0..<19], utc: utc) + "." + String(decoding: bytes[20..<23], as: UTF8.self)
    }

    /// `2025-03-05T14:02:11` → `Mar 05 14:02:11`: the part of ``localTime(_:utc:)`` that a
    /// burst of events shares (``ShortLineWriter`` keeps the last one).
    static func clock(_ bytes: ArraySlice<UInt8>, utc: Bool) -> String {
        let base = bytes.startIndex
        func number(_ range: Range<Int>) -> Int32 {
            Int32(String(decoding: bytes[(base + range.lowerBound)..<(base + range.upperBound)], as: UTF8.self)) ?? 0
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
        if utc { gmtime_r(&seconds, &local) } else { localtime_r(&seconds, &local) }
        var text = [CChar](repeating: 0, count: 32)
        let length = strftime(&text, text.count, "%b %d %H:%M:%S", &local)
        return String(decoding: text[0..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
