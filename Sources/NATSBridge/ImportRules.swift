import EventBusKit
import Foundation

/// The rules an imported event is held to: those of a local post through the control socket
/// (``EventPattern/validate(eventName:)``, and text that is UTF-8, which its JSON requires), and
/// no control characters in the origin host or the name — so another host, or anyone who can
/// publish under the prefix, cannot put on this bus a name a local poster could not (`*`, `>`,
/// empty tokens, whitespace), nor a terminal escape in every `eventbus tail`. Payload text (the
/// source, keys, string values) is checked by ``WireFormat/decode(_:name:host:shapes:)``.
///
/// A refusal is counted (``BridgeStatistics/malformed``) and announced by the importers as a
/// `bridge.gap` of kind `import_refused` (``GapBook`` gathers them: a flood is a few
/// announcements and log lines a second, not one per message).
enum ImportRules {
    struct Refusal: Error {
        /// Why, for the log.
        var reason: String
        /// The subject as it can be shown: bytes that are not printable ASCII as `\xNN`.
        var subject: String
    }

    /// The origin host and event name of `subject` (its bytes), or why it is refused.
    static func split(_ subject: UnsafeRawBufferPointer, _ subjects: Subjects) -> Result<(host: String, name: String), Refusal> {
        func refused(_ reason: String) -> Result<(host: String, name: String), Refusal> {
            .failure(Refusal(reason: reason, subject: shown(subject)))
        }
        guard let text = subject.withMemoryRebound(to: UInt8.self, { String(validating: $0, as: UTF8.self) }) else {
            return refused("the subject is not UTF-8")
        }
        guard let (host, name) = subjects.split(text) else {
            return refused("the subject is not \(subjects.prefix).<host>.<event name>")
        }
        if host.unicodeScalars.contains(where: isControl) { return refused("the host has a control character") }
        let nameText = String(name)
        do {
            try EventPattern.validate(eventName: nameText)
        } catch {
            return refused((error as? EventBusError)?.message ?? "\(error)")
        }
        if nameText.unicodeScalars.contains(where: isControl) { return refused("the event name has a control character") }
        return .success((String(host), nameText))
    }

    /// C0 and C1 controls and DEL.
    static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// `bytes` as text for a log line or a gap's subjects: printable ASCII as it is, anything
    /// else as `\xNN`, at most 256 bytes shown.
    static func shown(_ bytes: UnsafeRawBufferPointer) -> String {
        var text = ""
        for byte in bytes.prefix(256) {
            if (0x20..<0x7F).contains(byte) && byte != UInt8(ascii: "\\") {
                text.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                text += "\\x" + String(byte, radix: 16, uppercase: true).leftPadded(to: 2)
            }
        }
        return bytes.count > 256 ? text + "…" : text
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
