/// An object path element escaped as systemd's services escape names into paths
/// (`bus_label_escape`): every byte but ASCII letters and digits (and a leading digit) as `_xx`
/// in hex — logind's session `2` is `/org/freedesktop/login1/session/_32`.
enum DBusLabel {
    /// The name an escaped element stands for; nil for an empty element or a malformed escape.
    static func unescaped(_ label: String) -> String? {
        let bytes = Array(label.utf8)
        guard !bytes.isEmpty else { return nil }
        var name: [UInt8] = []
        var index = 0
        while index < bytes.count {
            if bytes[index] == UInt8(ascii: "_") {
                guard index + 2 < bytes.count, let high = hexValue(bytes[index + 1]), let low = hexValue(bytes[index + 2]) else {
                    return nil
                }
                name.append(high << 4 | low)
                index += 3
            } else {
                name.append(bytes[index])
                index += 1
            }
        }
        return String(decoding: name, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
