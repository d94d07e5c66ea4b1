import ArgumentParser
import ControlProtocol
import Foundation

/// `tail --output`: the journalctl formats, for events.
enum OutputFormat: String, CaseIterable, ExpressibleByArgument {
    /// One line per event for people, about a terminal's width (``EventFormatter/format(_:)``).
    case short
    /// One line per event with every field (``EventFormatter/verbose(_:)``).
    case verbose
    /// The protocol's event and gap lines, byte for byte.
    case json
    /// The same objects, indented, keys sorted.
    case jsonPretty = "json-pretty"
    /// The `message` field only, as `journalctl -o cat`; without one, the name and the path it
    /// is about (`fs.modified /etc/hosts`), or the name alone.
    case cat
    /// Journal Export Format: `systemd-journal-remote -o FILE.journal -` turns it into a journal
    /// file that `journalctl --file` reads.
    case export

    /// Renders a parsed event or gap line in a format other than ``json`` (which passes bytes).
    func render(_ line: JSON, with formatter: EventFormatter) -> [UInt8] {
        switch self {
        case .short, .json: return Array(formatter.format(line).utf8)
        case .verbose: return Array(formatter.verbose(line).utf8)
        case .jsonPretty: return Array((Self.pretty(line, indent: "") + "\n").utf8)
        case .cat: return Array(formatter.cat(line).utf8)
        case .export: return Self.export(line)
        }
    }

    private static func pretty(_ value: JSON, indent: String) -> String {
        let inner = indent + "  "
        switch value {
        case .object(let members) where !members.isEmpty:
            let lines = members.keys.sorted().map { key in
                inner + compact(.string(key)) + ": " + pretty(members[key]!, indent: inner)
            }
            return "{\n" + lines.joined(separator: ",\n") + "\n" + indent + "}"
        case .array(let items) where !items.isEmpty:
            return "[\n" + items.map { inner + pretty($0, indent: inner) }.joined(separator: ",\n") + "\n" + indent + "]"
        default:
            return compact(value)
        }
    }

    private static func compact(_ value: JSON) -> String {
        var writer = JSONWriter()
        writer.value(value)
        return String(decoding: writer.bytes, as: UTF8.self)
    }

    /// One entry: `MESSAGE` (the short line without time), the event as `EVENTBUS_*` fields, and
    /// each of its fields as `EVENTBUS_FIELD_<NAME>` (upper-cased; characters a journal field
    /// name cannot hold become `_`). Values with a newline use the format's binary form, so
    /// nothing a poster wrote can start a forged entry.
    private static func export(_ line: JSON) -> [UInt8] {
        var entry: [UInt8] = []
        func field(_ name: String, _ value: String) {
            let bytes = Array(value.utf8)
            entry += Array(name.utf8)
            if bytes.contains(0x0A) {
                entry.append(0x0A)
                var length = UInt64(bytes.count).littleEndian
                withUnsafeBytes(of: &length) { entry += $0 }
                entry += bytes
            } else {
                entry.append(UInt8(ascii: "="))
                entry += bytes
            }
            entry.append(0x0A)
        }
        if let micros = microseconds(line["time"]?.stringValue) { field("__REALTIME_TIMESTAMP", String(micros)) }
        if let mono = line["mono"]?.intValue { field("__MONOTONIC_TIMESTAMP", String(mono / 1000)) }
        if line["type"]?.stringValue == "gap" {
            let dropped = line["dropped"]?.intValue ?? 0
            field("MESSAGE", "\(dropped) event(s) missing (#\(line["first_seq"]?.intValue ?? 0)-#\(line["last_seq"]?.intValue ?? 0), \(line["reason"]?.stringValue ?? "?"))")
            field("PRIORITY", "4")
        } else {
            let fields = line["fields"]?.objectValue ?? [:]
            let name = line["name"]?.stringValue ?? "?"
            field("MESSAGE", fields["message"]?.stringValue ?? name)
            field("PRIORITY", fields["priority"]?.intValue.map { String($0) } ?? "6")
            field("EVENTBUS_NAME", name)
            field("EVENTBUS_SOURCE", line["source"]?.stringValue ?? "?")
            field("EVENTBUS_SEQ", String(line["seq"]?.intValue ?? 0))
            for key in fields.keys.sorted() {
                let value = fields[key]!
                field("EVENTBUS_FIELD_" + journalName(key), value.stringValue ?? compact(value))
            }
        }
        field("SYSLOG_IDENTIFIER", "eventbus")
        entry.append(0x0A)
        return entry
    }

    private static func journalName(_ key: String) -> String {
        String(key.uppercased().unicodeScalars.map { scalar in
            (scalar.isASCII && (CharacterSet.uppercaseLetters.contains(scalar) || CharacterSet.decimalDigits.contains(scalar)))
                ? Character(scalar) : "_"
        })
    }

    /// `2026-11-23T09:00:05.123456Z` → microseconds since the epoch.
    private static func microseconds(_ text: String?) -> Int64? {
        guard let text, text.count >= 20, text.hasSuffix("Z") else { return nil }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        let whole = String(text.prefix(19)) + "Z"
        guard let date = formatter.date(from: whole) else { return nil }
        let fraction = text.dropFirst(20).dropLast()
        let micros = Int64((fraction + String(repeating: "0", count: max(0, 6 - fraction.count))).prefix(6)) ?? 0
        return Int64(date.timeIntervalSince1970) * 1_000_000 + micros
    }
}
