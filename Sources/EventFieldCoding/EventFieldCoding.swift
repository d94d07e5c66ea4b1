import EventBusKit
import Foundation

/// The one binary form of an event's fields, shared by the two places events leave a process:
/// the NATS bridge's payload (between hosts) and the frames on a module worker's socket.
///
/// Why binary and not JSON: field types must survive exactly — an int stays an int, a double
/// keeps every bit, a date its `Double` — and JSON blurs them (`1` vs `1.0`, dates as text) unless
/// each value is tagged, which makes it both larger and slower. Each value is tagged with one
/// byte, numbers are their 8 little-endian bytes, strings a varint length and UTF-8.
///
/// ```
/// varint field count · (string key · u8 tag · value)*
/// tags: 1 string · 2 int (i64) · 3 double (bits) · 4 bool (u8) · 5 date (f64 bits, seconds since 2001)
/// string = varint length + UTF-8
/// ```
///
/// The NATS payload is versioned and read by other hosts, so this layout does not change
/// without a new payload version (docs/fleet.md).
public enum EventFieldCoding {
    public enum Tag: UInt8 {
        case string = 1, int, double, bool, date
    }

    /// The fewest bytes a field takes: a key's length (an empty key), its tag and a one-byte
    /// value (a bool, or an empty string's length). What a claimed count is checked against.
    public static let minimumFieldBytes = 3

    /// The most fields a decoder reserves room for before reading them: a payload can claim
    /// more fields than it holds (a repeated key holds one), and a dictionary reserved for a
    /// claim keeps that room as long as the event lives (replay buffer, clients' buffers).
    /// Beyond, it grows by doubling as fields are read: linear all the same.
    public static let reservedFieldsLimit = 64

    /// Appends the count and every field.
    public static func append(_ fields: [String: FieldValue], to buffer: inout [UInt8]) {
        appendVarint(UInt64(fields.count), to: &buffer)
        for (key, value) in fields {
            appendString(key, to: &buffer)
            switch value {
            case .string(let text):
                buffer.append(Tag.string.rawValue)
                appendString(text, to: &buffer)
            case .int(let number):
                buffer.append(Tag.int.rawValue)
                appendFixed(UInt64(bitPattern: number), to: &buffer)
            case .double(let number):
                buffer.append(Tag.double.rawValue)
                appendFixed(number.bitPattern, to: &buffer)
            case .bool(let flag):
                buffer.append(Tag.bool.rawValue)
                buffer.append(flag ? 1 : 0)
            case .date(let date):
                buffer.append(Tag.date.rawValue)
                appendFixed(date.timeIntervalSinceReferenceDate.bitPattern, to: &buffer)
            }
        }
    }

    public static func appendFixed(_ value: UInt64, to buffer: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { buffer.append(contentsOf: $0) }
    }

    public static func appendVarint(_ value: UInt64, to buffer: inout [UInt8]) {
        var rest = value
        while rest >= 0x80 {
            buffer.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        buffer.append(UInt8(rest))
    }

    public static func appendString(_ text: String, to buffer: inout [UInt8]) {
        var text = text
        text.withUTF8 { utf8 in
            appendVarint(UInt64(utf8.count), to: &buffer)
            buffer.append(contentsOf: utf8)
        }
    }
}

/// Why bytes are not fields: what is wrong, in words for a log line or an announcement.
public struct FieldDecodingError: Error, CustomStringConvertible, Sendable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Reads what ``EventFieldCoding`` wrote, checking every length against the bytes there are: a
/// short or corrupt input is an error, never a read past the end. A value, not a class: a
/// caller tries a read on a copy and keeps it only when it worked.
///
/// The reads an importer makes per field are `@inlinable`: called across the module boundary,
/// each byte, number and length was a function call of its own — a fifth of a NATS import
/// thread's time.
public struct FieldReader {
    public let bytes: UnsafeRawBufferPointer
    @usableFromInline var position: Int

    public init(_ bytes: UnsafeRawBufferPointer, offset: Int = 0) {
        self.bytes = bytes
        self.position = offset
    }

    /// Bytes read so far.
    @inlinable public var offset: Int { position }
    @inlinable public var isAtEnd: Bool { position == bytes.count }
    @inlinable public var remaining: Int { bytes.count - position }

    @inlinable
    public mutating func byte() -> UInt8? {
        guard position < bytes.count else { return nil }
        defer { position += 1 }
        return bytes.load(fromByteOffset: position, as: UInt8.self)
    }

    @inlinable
    public mutating func fixed() -> UInt64? {
        guard bytes.count - position >= 8 else { return nil }
        let value = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: position, as: UInt64.self))
        position += 8
        return value
    }

    @inlinable
    public mutating func varint() -> UInt64? {
        var value: UInt64 = 0
        var shift: UInt64 = 0
        while shift < 64 {
            guard let byte = byte() else { return nil }
            value |= UInt64(byte & 0x7f) << shift
            if byte < 0x80 { return value }
            shift += 7
        }
        return nil
    }

    /// A string, nil when the input ends inside it; bytes that are not UTF-8 are an error, as
    /// a local post cannot carry them (the control socket's JSON refuses them), where decoding
    /// them would replace them with U+FFFD unsaid.
    ///
    /// ASCII — most keys, sources and values — is valid UTF-8 as it is and is made into a
    /// `String` without validation: `String(validating:as:)` is generic over the encoding and
    /// looked its metadata up at run time on every call (a tenth of a core import thread's time).
    @inlinable
    public mutating func string() throws(FieldDecodingError) -> String? {
        guard let bytes = utf8() else { return nil }
        let utf8 = bytes.assumingMemoryBound(to: UInt8.self)
        if Self.isASCII(bytes) { return String(decoding: utf8, as: UTF8.self) }
        guard let text = String(validating: utf8, as: UTF8.self) else {
            throw FieldDecodingError("text that is not UTF-8")
        }
        return text
    }

    /// Whether every byte is below 0x80, eight at a time.
    @inlinable @inline(__always)
    static func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var index = 0
        var high: UInt64 = 0
        while index + 8 <= bytes.count {
            high |= bytes.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < bytes.count {
            high |= UInt64(bytes[index])
            index += 1
        }
        return high & 0x8080_8080_8080_8080 == 0
    }

    /// A string's UTF-8, not made into a `String`.
    @inlinable
    public mutating func utf8() -> UnsafeRawBufferPointer? {
        guard let length = varint(), UInt64(bytes.count - position) >= length else { return nil }
        let slice = UnsafeRawBufferPointer(rebasing: bytes[position..<position + Int(length)])
        position += Int(length)
        return slice
    }

    /// The value after a type tag; `key` names it in errors.
    @inlinable
    public mutating func value(tag: UInt8, key: @autoclosure () -> String) throws(FieldDecodingError) -> FieldValue {
        let value: FieldValue?
        switch EventFieldCoding.Tag(rawValue: tag) {
        case .string: value = try string().map(FieldValue.string)
        case .int: value = fixed().map { .int(Int64(bitPattern: $0)) }
        case .double: value = fixed().map { .double(Double(bitPattern: $0)) }
        case .bool: value = byte().map { .bool($0 != 0) }
        case .date: value = fixed().map { .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: $0))) }
        case nil: throw FieldDecodingError("field \(key()): unknown type tag \(tag)")
        }
        guard let value else { throw FieldDecodingError("field \(key()): truncated value") }
        return value
    }

    /// The field count, refused when the rest of the input could not hold that many fields
    /// (checked before anything is reserved for it).
    @inlinable
    public mutating func fieldCount() throws(FieldDecodingError) -> Int {
        guard let count = varint() else { throw FieldDecodingError("truncated field count") }
        let most = remaining / EventFieldCoding.minimumFieldBytes
        guard count <= UInt64(most) else {
            throw FieldDecodingError("the input claims \(count) fields; its last \(remaining) bytes hold at most \(most)")
        }
        return Int(count)
    }

    /// `count` fields key by key into a dictionary with room for `extra` more.
    public mutating func fields(count: Int, extra: Int = 0) throws(FieldDecodingError) -> [String: FieldValue] {
        var fields: [String: FieldValue] = Dictionary(minimumCapacity: min(count, EventFieldCoding.reservedFieldsLimit) + extra)
        for _ in 0..<count {
            guard let key = try string(), let tag = byte() else { throw FieldDecodingError("truncated field") }
            fields[key] = try value(tag: tag, key: key)
        }
        return fields
    }
}
