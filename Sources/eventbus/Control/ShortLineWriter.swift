import ControlProtocol
import Glibc

/// The short format of ``EventFormatter/format(_:)``, written straight from the bytes of an
/// `event` line: no ``JSON`` tree, no dictionary, no `String` per event, and the clock text of
/// the last second kept (a burst shares it), so `eventbus tail` keeps up with the host in the
/// format people read, not only in `--json`.
///
/// It reads the line in the shape the protocol fixes (``EventLine``: the members in that order,
/// field keys sorted) and returns false — the caller then formats the parsed
/// line — on anything else: a gap line, members in another order, a nested value, a field key
/// that is not plain ASCII, an imported event's `@origin.` fields. A value that needs more than
/// copying (an escape, non-ASCII text, a fraction, `null`) is parsed on its own and shown by
/// ``EventFormatter``'s own rules; text that is printable ASCII shows as itself under them. So
/// both ways print the same bytes. One tail, one thread.
struct ShortLineWriter {
    let formatter: EventFormatter
    private var text: [UInt8] = []
    private var cachedSecond: [UInt8] = []  // "2025-03-05T14:02:11"
    private var cachedClock: [UInt8] = []  // "Mar 05 14:02:11"

    init(formatter: EventFormatter) {
        self.formatter = formatter
        text.reserveCapacity(512)
    }

    /// Appends the line for `line` to `output`; false (nothing appended) when it is not an event
    /// line this fast way reads.
    mutating func write(_ line: UnsafeBufferPointer<UInt8>, into output: inout StandardOutput) -> Bool {
        text.removeAll(keepingCapacity: true)
        guard render(line) else { return false }
        text.withUnsafeBufferPointer { output.append($0) }
        return true
    }

    private mutating func render(_ line: UnsafeBufferPointer<UInt8>) -> Bool {
        var scanner = Scanner(bytes: line)
        guard scanner.take(EventLine.start), let sequence = scanner.digits(),
              scanner.take(EventLine.name), let name = scanner.string(),
              scanner.take(EventLine.source), let source = scanner.string(),
              scanner.take(EventLine.time), let time = scanner.string(),
              scanner.take(EventLine.mono), scanner.digits() != nil,
              scanner.take(EventLine.fields)
        else { return false }

        guard time.plain else { return false }
        // Known kinds are shown by their headline: the formatter's way.
        guard !EventFormatter.mayHaveHeadline(UnsafeBufferPointer(rebasing: line[name.inner])) else { return false }
        if time.inner.count >= 23 {
            clock(line, time)
        } else {
            paint("2") { $0.copy(line, time.inner); return true }  // the formatter shows it as it is
        }
        text.append(0x20)
        paint("2") { $0.byte(UInt8(ascii: "#")); $0.copy(line, sequence); return true }
        text.append(0x20)
        guard paint("1;36", { $0.shown(line, name, as: .escaped) }) else { return false }
        text.append(0x20)
        guard paint("2", { writer in
            writer.byte(UInt8(ascii: "("))
            defer { writer.byte(UInt8(ascii: ")")) }
            return writer.shown(line, source, as: .escaped)
        }) else { return false }

        var message: Scanner.Token?
        var priority: Scanner.Token?
        var previousKey: Range<Int>?
        if !scanner.take("}") {
            repeat {
                guard let key = scanner.string(), key.plain, scanner.take(":"), let value = scanner.value() else { return false }
                // Sorted and unique, as the formatter's order; an imported event's origin is
                // shown differently (the slow way).
                if let previousKey, !Self.ascending(line, previousKey, key.inner) { return false }
                previousKey = key.inner
                if Self.equal(line, key.inner, "message") {
                    message = value
                    continue
                }
                if Self.starts(line, key.inner, with: "@origin.") { return false }
                if Self.equal(line, key.inner, "priority") { priority = value }
                text.append(0x20)
                copy(line, key.inner)
                text.append(UInt8(ascii: "="))
                guard shown(line, value, as: .field) else { return false }
            } while scanner.take(",")
            guard scanner.take("}") else { return false }
        }
        guard scanner.take("}"), scanner.atEnd else { return false }

        if let message {
            var colour = ""
            if formatter.colour, let priority {
                guard let value = try? JSON.parse(UnsafeBufferPointer(rebasing: line[priority.whole])) else { return false }
                colour = EventFormatter.priorityColour(value.intValue)
            }
            text.append(UInt8(ascii: ":"))
            text.append(0x20)
            guard paint(colour, { $0.shown(line, message, as: .message) }) else { return false }
        }
        text.append(0x0A)
        return true
    }

    // MARK: Pieces

    /// The time as `Mar 05 14:02:11.123`, the clock part from the cache when the second is the
    /// last one's.
    private mutating func clock(_ line: UnsafeBufferPointer<UInt8>, _ time: Scanner.Token) {
        let start = time.inner.lowerBound
        let second = line[start..<(start + 19)]
        if !second.elementsEqual(cachedSecond) {
            cachedSecond = Array(second)
            cachedClock = Array(EventFormatter.clock(cachedSecond[...], utc: formatter.utc).utf8)
        }
        paint("2") { writer in
            writer.text.append(contentsOf: writer.cachedClock)
            writer.byte(UInt8(ascii: "."))
            writer.text.append(contentsOf: line[(start + 20)..<(start + 23)])
            return true
        }
    }

    private enum Role { case escaped, field, message }

    /// A value as the formatter shows it in `role`: printable ASCII copied (quoted as a field
    /// when it holds a space or `=`, or is empty); anything else parsed alone and shown by the
    /// formatter's own functions. False when it does not parse.
    private mutating func shown(_ line: UnsafeBufferPointer<UInt8>, _ token: Scanner.Token, as role: Role) -> Bool {
        if token.plain && token.isString {
            switch role {
            case .escaped, .message:
                copy(line, token.inner)
                return true
            case .field:
                let quoted = token.inner.isEmpty || line[token.inner].contains { $0 == 0x20 || $0 == UInt8(ascii: "=") }
                if quoted { text.append(UInt8(ascii: "\"")) }
                copy(line, token.inner)
                if quoted { text.append(UInt8(ascii: "\"")) }
                return true
            }
        }
        if token.plain && token.verbatim {
            copy(line, token.whole)
            return true
        }
        guard let value = try? JSON.parse(UnsafeBufferPointer(rebasing: line[token.whole])) else { return false }
        let shown: String
        switch role {
        case .escaped: shown = EventFormatter.escape(value.stringValue ?? "?")
        case .field: shown = EventFormatter.show(value)
        case .message: shown = value.stringValue.map(EventFormatter.escape) ?? EventFormatter.show(value)
        }
        text.append(contentsOf: shown.utf8)
        return true
    }

    /// `body`'s bytes in the formatter's colour `code` (none without colour).
    @discardableResult
    private mutating func paint(_ code: String, _ body: (inout ShortLineWriter) -> Bool) -> Bool {
        guard formatter.colour, !code.isEmpty else { return body(&self) }
        text.append(contentsOf: "\u{1B}[\(code)m".utf8)
        guard body(&self) else { return false }
        text.append(contentsOf: "\u{1B}[0m".utf8)
        return true
    }

    private mutating func byte(_ byte: UInt8) { text.append(byte) }

    private mutating func copy(_ line: UnsafeBufferPointer<UInt8>, _ range: Range<Int>) {
        text.append(contentsOf: UnsafeBufferPointer(rebasing: line[range]))
    }

    private static func equal(_ line: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, _ word: StaticString) -> Bool {
        range.count == word.utf8CodeUnitCount && memcmp(line.baseAddress! + range.lowerBound, word.utf8Start, range.count) == 0
    }

    private static func starts(_ line: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, with word: StaticString) -> Bool {
        range.count >= word.utf8CodeUnitCount && memcmp(line.baseAddress! + range.lowerBound, word.utf8Start, word.utf8CodeUnitCount) == 0
    }

    /// `first` sorts strictly before `second` (bytes; for ASCII the order of Swift's `String`).
    private static func ascending(_ line: UnsafeBufferPointer<UInt8>, _ first: Range<Int>, _ second: Range<Int>) -> Bool {
        let order = memcmp(line.baseAddress! + first.lowerBound, line.baseAddress! + second.lowerBound, min(first.count, second.count))
        return order < 0 || (order == 0 && first.count < second.count)
    }
}

/// Reads the tokens of one event line, in the order the host writes them.
private struct Scanner {
    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0

    /// A value's place in the line: `whole` with its quotes, `inner` without. `plain`: a string
    /// of printable ASCII with no escape; `verbatim`: a number or boolean whose text is how the
    /// formatter shows it.
    struct Token {
        var whole: Range<Int>
        var inner: Range<Int>
        var plain: Bool
        var isString: Bool
        var verbatim = false
    }

    var atEnd: Bool { position == bytes.count }

    mutating func take(_ word: StaticString) -> Bool {
        let count = word.utf8CodeUnitCount
        guard position + count <= bytes.count, memcmp(bytes.baseAddress! + position, word.utf8Start, count) == 0 else { return false }
        position += count
        return true
    }

    /// An unsigned integer's digits: 1 to 18 (surely within `Int64`), no leading zero.
    mutating func digits() -> Range<Int>? {
        let start = position
        while position < bytes.count, bytes[position] &- UInt8(ascii: "0") < 10 { position += 1 }
        let count = position - start
        guard (1...18).contains(count), count == 1 || bytes[start] != UInt8(ascii: "0") else { return nil }
        return start..<position
    }

    mutating func string() -> Token? {
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { return nil }
        let start = position
        position += 1
        var plain = true
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                position += 1
                return Token(whole: start..<position, inner: (start + 1)..<(position - 1), plain: plain, isString: true)
            }
            if byte == UInt8(ascii: "\\") {
                plain = false
                position += 2
                continue
            }
            if byte < 0x20 || byte > 0x7E { plain = false }
            position += 1
        }
        return nil
    }

    /// A string, number or literal; nil for an object or a list (and for what is not JSON).
    mutating func value() -> Token? {
        guard position < bytes.count else { return nil }
        switch bytes[position] {
        case UInt8(ascii: "\""):
            return string()
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "t"), UInt8(ascii: "f"), UInt8(ascii: "n"):
            let start = position
            while position < bytes.count, bytes[position] != UInt8(ascii: ","), bytes[position] != UInt8(ascii: "}") { position += 1 }
            let range = start..<position
            var token = Token(whole: range, inner: range, plain: true, isString: false)
            // An integer shows as its text unless it reads differently: "-0", a leading zero
            // (not JSON), or digits that may pass Int64. Those, and fractions, are parsed.
            let negative = bytes[start] == UInt8(ascii: "-")
            let digits = (negative ? start + 1 : start)..<position
            token.verbatim = (1...18).contains(digits.count) && bytes[digits].allSatisfy { $0 &- UInt8(ascii: "0") < 10 }
                && (digits.count == 1 ? !(negative && bytes[digits.lowerBound] == UInt8(ascii: "0")) : bytes[digits.lowerBound] != UInt8(ascii: "0"))
                || Self.isShortestDecimal(bytes, digits)
                || Self.same(bytes, range, "true") || Self.same(bytes, range, "false")
            return token
        default:
            return nil
        }
    }

    /// Whether a fraction's text is how Swift writes its value (`Double.description`, which
    /// the formatter shows, and which the host writes): `I.F` with no leading zero in `I`, no
    /// trailing zero in `F` (except `.0`), at most 15 significant digits (so no shorter text
    /// reads back as the same double), from 0.0001 to below 10^15 (where Swift switches to an
    /// exponent). Anything else is parsed and shown as Swift writes it.
    private static func isShortestDecimal(_ bytes: UnsafeBufferPointer<UInt8>, _ number: Range<Int>) -> Bool {
        guard let dot = number.firstIndex(where: { bytes[$0] == UInt8(ascii: ".") }) else { return false }
        let whole = number.lowerBound..<dot
        let fraction = (dot + 1)..<number.upperBound
        func isDigit(_ index: Int) -> Bool { bytes[index] &- UInt8(ascii: "0") < 10 }
        guard (1...15).contains(whole.count), !fraction.isEmpty, whole.allSatisfy(isDigit), fraction.allSatisfy(isDigit),
              whole.count == 1 || bytes[whole.lowerBound] != UInt8(ascii: "0"),
              fraction.count == 1 || bytes[fraction.upperBound - 1] != UInt8(ascii: "0")
        else { return false }
        let fractionIsZero = fraction.count == 1 && bytes[fraction.lowerBound] == UInt8(ascii: "0")
        if whole.count == 1 && bytes[whole.lowerBound] == UInt8(ascii: "0") {
            if fractionIsZero { return true }
            let leadingZeros = fraction.prefix { bytes[$0] == UInt8(ascii: "0") }.count
            return leadingZeros <= 3 && fraction.count - leadingZeros <= 15
        }
        return whole.count + (fractionIsZero ? 0 : fraction.count) <= 15
    }

    private static func same(_ bytes: UnsafeBufferPointer<UInt8>, _ range: Range<Int>, _ word: StaticString) -> Bool {
        range.count == word.utf8CodeUnitCount && memcmp(bytes.baseAddress! + range.lowerBound, word.utf8Start, range.count) == 0
    }
}
