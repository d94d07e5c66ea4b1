/// Sizes as people write them in a config file: `64MiB`, `16 MB`, `512M`, `2G`, `65536K`, or plain
/// bytes. Every unit is binary (K = KB = KiB = 1024 bytes), whatever its spelling: these are
/// memory budgets, and a reader who writes `16 MB` means the same as one who writes `16MiB` (as
/// PostgreSQL and the JVM read them). Deliberately small: one whole number, one unit.
public enum ByteSizeText {
    private static let scales: [Character: Int] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40]

    public static func parse(_ text: String) -> Int? {
        var rest = Substring(text.uppercased())
        rest = rest.drop(while: \.isWhitespace)
        while rest.last?.isWhitespace == true { rest = rest.dropLast() }
        if rest.hasSuffix("IB") {
            rest = rest.dropLast(2)
            guard let last = rest.last, scales[last] != nil else { return nil }  // `iB` needs K, M, G or T
        } else if rest.hasSuffix("B") {
            rest = rest.dropLast()
        }
        var scale = 1
        if let last = rest.last, let unit = scales[last] {
            scale = unit
            rest = rest.dropLast()
        }
        while rest.last?.isWhitespace == true { rest = rest.dropLast() }
        guard !rest.isEmpty, rest.allSatisfy(\.isASCII), rest.allSatisfy(\.isNumber), let number = Int(rest) else { return nil }
        let (bytes, overflow) = number.multipliedReportingOverflow(by: scale)
        return overflow ? nil : bytes
    }

    /// `64MiB`, `1536KiB`, `100B`: the largest unit that divides the size exactly, as a config
    /// would write it (for messages and summaries).
    public static func describe(_ bytes: Int) -> String {
        for (unit, scale) in [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        where bytes != 0 && bytes % scale == 0 {
            return "\(bytes / scale)\(unit)"
        }
        return "\(bytes)B"
    }
}
