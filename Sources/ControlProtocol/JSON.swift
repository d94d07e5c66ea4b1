import Glibc

/// A JSON value as the control protocol carries it.
///
/// Why not Foundation's `JSONSerialization`: it reads `true` and `1` both as `NSNumber`, so a
/// posted field's type (bool, int, double) could not be told apart, and it costs several
/// allocations per value on the host's request path. Numbers here keep the distinction JSON's
/// text makes: digits only → ``int``, a fraction or exponent → ``double``. An integer beyond
/// `Int64` is refused rather than rounded into a double (a posted id or byte count must not
/// silently change), and so is an object with a key twice (which value wins is not defined).
public enum JSON: Sendable, Equatable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object([String: JSON])

    public subscript(key: String) -> JSON? {
        if case .object(let members) = self { return members[key] }
        return nil
    }

    public var stringValue: String? { if case .string(let value) = self { return value }; return nil }
    public var intValue: Int64? { if case .int(let value) = self { return value }; return nil }
    public var boolValue: Bool? { if case .bool(let value) = self { return value }; return nil }
    public var doubleValue: Double? {
        switch self {
        case .double(let value): return value
        case .int(let value): return Double(value)
        default: return nil
        }
    }
    public var arrayValue: [JSON]? { if case .array(let value) = self { return value }; return nil }
    public var objectValue: [String: JSON]? { if case .object(let value) = self { return value }; return nil }

    /// What kind of value this is, for "expected …, found …" messages.
    public var kindName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .int: return "an integer"
        case .double: return "a number"
        case .string: return "a string"
        case .array: return "a list"
        case .object: return "an object"
        }
    }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByDictionaryLiteral, ExpressibleByArrayLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(dictionaryLiteral elements: (String, JSON)...) { self = .object(Dictionary(elements) { $1 }) }
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
}

/// Malformed JSON text: what is wrong and the byte offset where the parser noticed.
public struct JSONParseError: Error, Equatable, CustomStringConvertible {
    public var message: String
    public var offset: Int
    public var description: String { "\(message) at byte \(offset + 1)" }
}

extension JSON {
    /// Parses one JSON text (an object, list or scalar, surrounded by optional whitespace).
    public static func parse(_ text: String) throws(JSONParseError) -> JSON {
        var text = text
        let result = text.withUTF8 { bytes in Result { () throws(JSONParseError) in try parse(bytes) } }
        return try result.get()
    }

    /// Parses one JSON text from UTF-8 bytes; nothing but whitespace may follow it.
    public static func parse(_ bytes: UnsafeBufferPointer<UInt8>) throws(JSONParseError) -> JSON {
        var parser = JSONParser(bytes: bytes)
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.position == bytes.count else { throw parser.error("unexpected text after the JSON value") }
        return value
    }
}

/// A recursive-descent parser over UTF-8 bytes (RFC 8259), bounded in nesting depth so a
/// hostile line cannot exhaust the stack.
private struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0
    static let maximumDepth = 64

    init(bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    func error(_ message: String) -> JSONParseError {
        JSONParseError(message: message, offset: position)
    }

    mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    mutating func value(depth: Int) throws(JSONParseError) -> JSON {
        skipWhitespace()
        guard position < bytes.count else { throw error("unexpected end of input") }
        switch bytes[position] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"): try literal("true"); return .bool(true)
        case UInt8(ascii: "f"): try literal("false"); return .bool(false)
        case UInt8(ascii: "n"): try literal("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default:
            // A printable ASCII character as itself; any other byte by its value, so a message
            // about hostile input carries no control characters into a log or a terminal.
            let byte = bytes[position]
            throw error((0x21...0x7E).contains(byte) ? "unexpected character '\(Character(Unicode.Scalar(byte)))'"
                                                      : "unexpected byte 0x\(String(byte, radix: 16, uppercase: true))")
        }
    }

    private mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let count = word.utf8CodeUnitCount
        guard position + count <= bytes.count,
              memcmp(bytes.baseAddress! + position, word.utf8Start, count) == 0
        else { throw error("invalid literal") }
        position += count
    }

    private mutating func object(depth: Int) throws(JSONParseError) -> JSON {
        guard depth <= Self.maximumDepth else { throw error("nested more than \(Self.maximumDepth) levels") }
        position += 1  // {
        var members: [String: JSON] = [:]
        members.reserveCapacity(4)  // one allocation for a small object, not three growths
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
            position += 1
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: "\"") else { throw error("expected a member name in quotes") }
            let key = try string()
            skipWhitespace()
            guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { throw error("expected ':' after a member name") }
            position += 1
            guard members.updateValue(try value(depth: depth), forKey: key) == nil else {
                throw error("the key \"\(key)\" appears twice in an object")
            }
            skipWhitespace()
            guard position < bytes.count else { throw error("unexpected end of input in an object") }
            switch bytes[position] {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "}"): position += 1; return .object(members)
            default: throw error("expected ',' or '}' in an object")
            }
        }
    }

    private mutating func array(depth: Int) throws(JSONParseError) -> JSON {
        guard depth <= Self.maximumDepth else { throw error("nested more than \(Self.maximumDepth) levels") }
        position += 1  // [
        var items: [JSON] = []
        skipWhitespace()
        if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
            position += 1
            return .array(items)
        }
        while true {
            items.append(try value(depth: depth))
            skipWhitespace()
            guard position < bytes.count else { throw error("unexpected end of input in a list") }
            switch bytes[position] {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "]"): position += 1; return .array(items)
            default: throw error("expected ',' or ']' in a list")
            }
        }
    }

    private mutating func string() throws(JSONParseError) -> String {
        position += 1  // opening quote
        let start = position
        // Fast path: no escapes — the bytes between the quotes are the string. ASCII needs no
        // validation (and `String(validating:)` costs a generic metadata lookup per call).
        var ascii = true
        while position < bytes.count {
            let byte = bytes[position]
            if byte == UInt8(ascii: "\"") {
                let slice = UnsafeBufferPointer(rebasing: bytes[start..<position])
                position += 1
                if ascii { return String(decoding: slice, as: UTF8.self) }
                guard let text = String(validating: slice, as: UTF8.self) else { throw error("invalid UTF-8 in a string") }
                return text
            }
            ascii = ascii && byte < 0x80
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error("control character in a string") }
            position += 1
        }
        var decoded = Array(bytes[start..<position])
        while position < bytes.count {
            let byte = bytes[position]
            position += 1
            switch byte {
            case UInt8(ascii: "\""):
                guard let text = String(validating: decoded, as: UTF8.self) else { throw error("invalid UTF-8 in a string") }
                return text
            case UInt8(ascii: "\\"):
                guard position < bytes.count else { break }
                let escape = bytes[position]
                position += 1
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): decoded.append(escape)
                case UInt8(ascii: "b"): decoded.append(0x08)
                case UInt8(ascii: "f"): decoded.append(0x0C)
                case UInt8(ascii: "n"): decoded.append(0x0A)
                case UInt8(ascii: "r"): decoded.append(0x0D)
                case UInt8(ascii: "t"): decoded.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard position + 1 < bytes.count, bytes[position] == UInt8(ascii: "\\"),
                              bytes[position + 1] == UInt8(ascii: "u") else { throw error("unpaired surrogate in \\u escape") }
                        position += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw error("unpaired surrogate in \\u escape") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw error("unpaired surrogate in \\u escape")
                    }
                    decoded.append(contentsOf: Array(String(Unicode.Scalar(scalar)!).utf8))
                default:
                    position -= 1
                    throw error("invalid escape '\\\(Character(Unicode.Scalar(escape)))'")
                }
            default:
                if byte < 0x20 {
                    position -= 1
                    throw error("control character in a string")
                }
                decoded.append(byte)
            }
        }
        throw error("unterminated string")
    }

    private mutating func hex4() throws(JSONParseError) -> UInt32 {
        guard position + 4 <= bytes.count else { throw error("short \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[position]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw error("invalid hex digit in \\u escape")
            }
            value = value << 4 | digit
            position += 1
        }
        return value
    }

    private mutating func number() throws(JSONParseError) -> JSON {
        let start = position
        if bytes[position] == UInt8(ascii: "-") { position += 1 }
        guard position < bytes.count, isDigit(bytes[position]) else { throw error("invalid number") }
        if bytes[position] == UInt8(ascii: "0") {
            position += 1
        } else {
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        var isInteger = true
        if position < bytes.count, bytes[position] == UInt8(ascii: ".") {
            isInteger = false
            position += 1
            guard position < bytes.count, isDigit(bytes[position]) else { throw error("invalid number: digits must follow '.'") }
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        if position < bytes.count, bytes[position] == UInt8(ascii: "e") || bytes[position] == UInt8(ascii: "E") {
            isInteger = false
            position += 1
            if position < bytes.count, bytes[position] == UInt8(ascii: "+") || bytes[position] == UInt8(ascii: "-") { position += 1 }
            guard position < bytes.count, isDigit(bytes[position]) else { throw error("invalid number: digits must follow the exponent") }
            while position < bytes.count, isDigit(bytes[position]) { position += 1 }
        }
        if isInteger {
            // Digit by digit with overflow checks: no String on the way.
            let negative = bytes[start] == UInt8(ascii: "-")
            var value: Int64 = 0
            for index in (negative ? start + 1 : start)..<position {
                let digit = Int64(bytes[index] &- UInt8(ascii: "0"))
                let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
                let (next, overflow2) = negative ? times10.subtractingReportingOverflow(digit) : times10.addingReportingOverflow(digit)
                guard !overflow1, !overflow2 else {
                    throw error("integer out of range (a field holds -9223372036854775808...9223372036854775807); quote it to keep it as a string")
                }
                value = next
            }
            return .int(value)
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else { throw error("number out of range") }
        return .double(value)
    }

    @inline(__always)
    private func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }
}
