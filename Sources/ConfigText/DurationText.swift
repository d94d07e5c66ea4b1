/// Durations as people write them in a config file: `250ms`, `30s`, `5m`, `1.5h`, `1d`; a bare
/// number means seconds. Deliberately small: one number, one unit.
public enum DurationText {
    private static let units: [(suffix: String, nanoseconds: Double)] = [
        ("ms", 1e6), ("us", 1e3), ("ns", 1), ("s", 1e9), ("m", 60e9), ("h", 3600e9), ("d", 86_400e9),
    ]

    public static func parse(_ text: String) -> Duration? {
        let trimmed = text.trimmingWhitespace()
        var number = Substring(trimmed)
        var scale = 1e9
        for unit in units where trimmed.hasSuffix(unit.suffix) {
            number = trimmed.dropLast(unit.suffix.count)
            scale = unit.nanoseconds
            break
        }
        let digits = number.trimmingWhitespace()
        guard !digits.isEmpty, digits.allSatisfy({ $0.isNumber || $0 == "." }),
              let value = Double(digits), value.isFinite, value >= 0
        else { return nil }
        let nanoseconds = value * scale
        guard nanoseconds < Double(Int64.max) else { return nil }
        return .nanoseconds(Int64(nanoseconds.rounded()))
    }
}

extension StringProtocol {
    fileprivate func trimmingWhitespace() -> String {
        String(drop(while: \.isWhitespace).reversed().drop(while: \.isWhitespace).reversed())
    }
}
