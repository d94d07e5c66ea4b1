/// systemd's D-Bus object paths for units: `/org/freedesktop/systemd1/unit/` and the name with
/// every byte but ASCII letters and digits (and a leading digit) written as `_xx` (hex), so `nginx.service` is
/// `…/unit/nginx_2eservice`. PropertiesChanged carries only the path; the name comes back from
/// it here, without asking systemd (asking about a unit can load it — see the units source's
/// `UnitsConnection`).
public enum UnitPath {
    public static let prefix = "/org/freedesktop/systemd1/unit/"

    /// The unit name of a unit object path; nil for another path or a malformed escape.
    public static func unitName(of path: String) -> String? {
        guard path.hasPrefix(prefix) else { return nil }
        let label = Array(path.utf8.dropFirst(prefix.utf8.count))
        guard !label.isEmpty else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(label.count)
        var index = 0
        while index < label.count {
            if label[index] == UInt8(ascii: "_") {
                guard index + 2 < label.count, let high = hexValue(label[index + 1]), let low = hexValue(label[index + 2]) else {
                    return nil
                }
                bytes.append(high << 4 | low)
                index += 3
            } else {
                bytes.append(label[index])
                index += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The object path of a unit, as systemd escapes it.
    public static func path(of unit: String) -> String {
        var label = ""
        for (offset, byte) in unit.utf8.enumerated() {
            // A digit is escaped in front only (bus_label_escape: a path element may not start with one).
            if (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
                || (offset > 0 && byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) {
                label.unicodeScalars.append(Unicode.Scalar(byte))
            } else {
                let digits = Array("0123456789abcdef".utf8)
                label += "_" + String(decoding: [digits[Int(byte >> 4)], digits[Int(byte & 15)]], as: UTF8.self)
            }
        }
        return prefix + label
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
