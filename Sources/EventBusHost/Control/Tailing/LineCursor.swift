import ControlProtocol

/// Writes JSON text through a pointer into memory the caller has already made large enough.
///
/// Why: ``EventJSON`` encodes every event a tail receives on the control loop, the busiest
/// thread of a tail. Appending to a ``JSONWriter``'s array checks its uniqueness and capacity
/// at each byte and calls across the module boundary at each piece; this checks nothing, so the
/// caller bounds the text first (``stringBound(_:)``, ``scalarBound``) and reserves that much.
///
/// The text is exactly what ``JSONWriter`` writes for the same values (the same escapes, the
/// same digits, `Double.description`), so an event line reads the same whoever wrote it.
struct LineCursor {
    let base: UnsafeMutablePointer<UInt8>
    private(set) var count = 0

    init(_ base: UnsafeMutablePointer<UInt8>) {
        self.base = base
    }

    /// The most bytes ``string(_:)`` writes for `text`: quotes, and six bytes (`\u00XX`) for
    /// every byte at worst.
    @inline(__always)
    static func stringBound(_ text: String) -> Int { 2 + 6 * text.utf8.count }

    /// The most bytes an integer, a double (`-2.2250738585072014e-308` is 24), a boolean or a
    /// quoted date takes.
    static let scalarBound = 32

    @inline(__always)
    mutating func byte(_ byte: UInt8) {
        base[count] = byte
        count += 1
    }

    @inline(__always)
    mutating func raw(_ text: StaticString) {
        (base + count).update(from: text.utf8Start, count: text.utf8CodeUnitCount)
        count += text.utf8CodeUnitCount
    }

    @inline(__always)
    mutating func bytes(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let start = bytes.baseAddress else { return }
        (base + count).update(from: start, count: bytes.count)
        count += bytes.count
    }

    mutating func string(_ text: String) {
        // In place when the string's bytes are contiguous (native strings, small ones too);
        // `withUTF8` would need a mutable copy of it.
        if text.utf8.withContiguousStorageIfAvailable({ string($0) }) != nil { return }
        var text = text
        text.withUTF8 { string($0) }
    }

    /// A JSON string, by the rule ``JSONWriter`` writes too (``writeJSONString(_:byte:run:)``).
    mutating func string(_ utf8: UnsafeBufferPointer<UInt8>) {
        writeJSONString(utf8, byte: { byte($0) }, run: { bytes($0) })
    }

    /// Decimal digits, written back to front in place once their number is known. Every event
    /// line has three large numbers (sequence, monotonic nanoseconds, microseconds): counting
    /// and writing them a digit at a time was a third of the line's fixed part.
    mutating func unsigned(_ value: UInt64) {
        var digitCount = 1
        var rest = value
        while rest >= 100 {
            digitCount += 2
            rest /= 100
        }
        if rest >= 10 { digitCount += 1 }
        digits(value, digitCount)
    }

    @inline(__always)
    mutating func int(_ value: Int64) {
        if value < 0 { byte(UInt8(ascii: "-")) }
        unsigned(value.magnitude)
    }

    /// "00" "01" … "99": two digits per division.
    private static let digitPairs: StaticString = """
        00010203040506070809101112131415161718192021222324252627282930313233343536373839\
        40414243444546474849505152535455565758596061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899
        """

    /// Exactly `width` decimal digits of `value` (zero-padded; higher digits are cut).
    @inline(__always)
    mutating func digits(_ value: UInt64, _ width: Int) {
        var value = value
        var index = count + width
        let pairs = Self.digitPairs.utf8Start
        while index - count >= 2 {
            let pair = Int(truncatingIfNeeded: value % 100) &* 2
            value /= 100
            index -= 2
            base[index] = pairs[pair]
            base[index + 1] = pairs[pair + 1]
        }
        if index > count { base[count] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: value % 10) }
        count += width
    }

    /// Swift's shortest text that reads back as `value`; `null` for infinities and NaN (JSON has
    /// neither), as ``JSONWriter/double(_:)``.
    mutating func double(_ value: Double) {
        guard value.isFinite else {
            raw("null")
            return
        }
        if shortDecimal(value) { return }
        var text = value.description
        text.withUTF8 { bytes($0) }
    }

    /// Powers of ten a ``shortDecimal(_:)`` may scale by.
    private static let decimalScales: [Double] = [1, 10, 100, 1_000, 10_000]

    /// Writes `value` as `Double.description` does when it is a decimal of at most four places
    /// and fifteen significant digits (12.5, 0.25, 3.0, 1200.0 — what most measurements are);
    /// returns false, having written nothing, for any other. Formatting the shortest digits in
    /// general is the bulk of a double's cost.
    ///
    /// Why the text is the same: if `m / 10^k`, correctly rounded, is `value`, the decimal
    /// `m·10^-k` reads back as `value`; with at most 15 significant digits no other decimal of
    /// 15 digits or fewer does (a double tells apart every 15-digit decimal), so it is the
    /// shortest, and the smallest `k` gives it without trailing zeros. `description` prints
    /// plain (not exponent) notation for magnitudes in [1e-4, 2^53), which holds these.
    private mutating func shortDecimal(_ value: Double) -> Bool {
        let magnitude = value.magnitude
        if magnitude == 0 {
            if value.sign == .minus { raw("-0.0") } else { raw("0.0") }
            return true
        }
        for places in 0..<Self.decimalScales.count {
            let scale = Self.decimalScales[places]
            let scaled = magnitude * scale
            guard scaled < 1e15 else { return false }
            let units = scaled.rounded()
            guard units / scale == magnitude, units >= 1 else { continue }
            let digits = UInt64(units)
            if value.sign == .minus { byte(UInt8(ascii: "-")) }
            if places == 0 {
                unsigned(digits)
                raw(".0")
            } else {
                let divisor = UInt64(scale)
                unsigned(digits / divisor)
                byte(UInt8(ascii: "."))
                self.digits(digits % divisor, places)
            }
            return true
        }
        return false
    }

    @inline(__always)
    mutating func bool(_ value: Bool) {
        if value { raw("true") } else { raw("false") }
    }
}
