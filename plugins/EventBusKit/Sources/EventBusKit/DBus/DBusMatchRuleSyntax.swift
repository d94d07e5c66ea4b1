/// The text of D-Bus match rules (`interface='a.b',arg0='x'`), as the D-Bus specification and
/// dbus-daemon read it — the one syntax for ``DBusMatch/init(parsing:)``, ``DBusMatch/rule``
/// and ``DBusMatch/text``, so each reads back what the others write.
///
/// A value is unquoted up to the next comma, or quoted in apostrophes; inside quotes every
/// character stands for itself (a backslash too, and a comma), outside them `\'` is an
/// apostrophe and any other backslash is itself. An apostrophe inside a value is therefore
/// written by closing the quote: `it's` is `'it'\''s'`.
///
/// Why not sd-bus's own parser: it reads a backslash inside quotes as an escape, dbus-daemon
/// (which routes by the rule) as itself, so a value with a backslash or an apostrophe means
/// two different things to the two. The host sends the rule to the bus as dbus-daemon reads
/// it and matches locally on ``DBusMatch``'s values, never on a reparsed text.
enum DBusMatchRuleSyntax {
    /// `value` quoted so that dbus-daemon reads it back exactly.
    static func quoted(_ value: String) -> String {
        "'" + value.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }

    /// `value` bare when it has nothing the syntax reads (names, paths, plain words), else
    /// ``quoted(_:)``: the short form people write.
    static func written(_ value: String) -> String {
        let plain = !value.isEmpty && value.unicodeScalars.allSatisfy { scalar in
            (scalar >= "a" && scalar <= "z") || (scalar >= "A" && scalar <= "Z") || (scalar >= "0" && scalar <= "9")
                || "_.:/-@+".unicodeScalars.contains(scalar)
        }
        return plain ? value : quoted(value)
    }

    /// The `key=value` pairs of `text` in order, as dbus-daemon splits them (whitespace before
    /// a key is skipped). Throws for a pair without `=`, an empty key and an unclosed quote.
    static func pairs(of text: String) throws -> [(key: String, value: String)] {
        var pairs: [(key: String, value: String)] = []
        var characters = Substring(text)
        while true {
            characters = characters.drop { $0 == " " || $0 == "\t" || $0 == "\n" || $0 == "\r" }
            if characters.isEmpty { return pairs }
            guard let equals = characters.firstIndex(of: "=") else {
                throw EventBusError(.invalidDBusWatch, "\"\(characters)\" in the D-Bus match \"\(text)\" has no '=' (expected key=value pairs separated by commas)")
            }
            let key = String(characters[..<equals]).trimmingTrailingWhitespace()
            guard !key.isEmpty else {
                throw EventBusError(.invalidDBusWatch, "a value without a key in the D-Bus match \"\(text)\"")
            }
            var value = ""
            var quoted = false
            var index = characters.index(after: equals)
            var ended = false
            while index < characters.endIndex {
                let character = characters[index]
                index = characters.index(after: index)
                if quoted {
                    if character == "'" { quoted = false } else { value.append(character) }
                } else if character == "'" {
                    quoted = true
                } else if character == "," {
                    ended = true
                    break
                } else if character == "\\", index < characters.endIndex, characters[index] == "'" {
                    value.append("'")
                    index = characters.index(after: index)
                } else {
                    value.append(character)
                }
            }
            if quoted {
                throw EventBusError(.invalidDBusWatch, "the value of \(key) in the D-Bus match \"\(text)\" opens a quote it never closes")
            }
            pairs.append((key, value))
            characters = characters[index...]
            if !ended { return pairs }
        }
    }
}

extension String {
    fileprivate func trimmingTrailingWhitespace() -> String {
        var text = Substring(self)
        while let last = text.last, last == " " || last == "\t" || last == "\n" || last == "\r" { text = text.dropLast() }
        return String(text)
    }
}
