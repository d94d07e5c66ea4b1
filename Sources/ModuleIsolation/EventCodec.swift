@_spi(EventBusHost) import EventBusKit
import Foundation

/// The binary form of an ``Event`` on the worker socket: fixed-width numbers little-endian,
/// strings as a `UInt32` byte count and UTF-8, fields as `(key, tag, value)` with a tag per
/// ``FieldValue`` case — so an int stays an int and a bool a bool, which JSON would blur.
///
/// `sequence: u64, monotonic: u64, wall: f64 (seconds since 1970), name, source, count: u32,
/// fields…`. Why binary: a worker receives hundreds of thousands of events a second; this is a
/// few appends per event where JSON text costs escaping and number formatting.
public enum EventCodec {
    enum Tag: UInt8 {
        case string = 1, int, double, bool, date
    }

    /// The fewest bytes a field takes: a key's length (an empty key), its tag and a bool.
    static let minimumFieldBytes = 6

    /// The most fields ``WireDecoder/event()`` reserves room for before reading them.
    static let reservedFieldsLimit = 64

    public static func encode(_ event: Event, into bytes: inout [UInt8]) {
        bytes.appendLittleEndian(event.sequence)
        bytes.appendLittleEndian(event.monotonicNanoseconds)
        bytes.appendLittleEndian(event.wallTime.timeIntervalSince1970.bitPattern)
        appendString(event.name, into: &bytes)
        appendString(event.source, into: &bytes)
        bytes.appendLittleEndian(UInt32(event.fields.count))
        for (key, value) in event.fields {
            appendString(key, into: &bytes)
            switch value {
            case .string(let text):
                bytes.append(Tag.string.rawValue)
                appendString(text, into: &bytes)
            case .int(let number):
                bytes.append(Tag.int.rawValue)
                bytes.appendLittleEndian(number)
            case .double(let number):
                bytes.append(Tag.double.rawValue)
                bytes.appendLittleEndian(number.bitPattern)
            case .bool(let flag):
                bytes.append(Tag.bool.rawValue)
                bytes.append(flag ? 1 : 0)
            case .date(let date):
                bytes.append(Tag.date.rawValue)
                bytes.appendLittleEndian(date.timeIntervalSince1970.bitPattern)
            }
        }
    }

    @inline(__always)
    static func appendString(_ string: String, into bytes: inout [UInt8]) {
        var string = string
        string.withUTF8 { utf8 in
            bytes.appendLittleEndian(UInt32(utf8.count))
            bytes.append(contentsOf: utf8)
        }
    }
}

/// Reads what ``EventCodec`` and ``FrameBuffer`` wrote, checking every length against the bytes
/// there are: a short or corrupt frame is an error, never a read past the end.
public struct WireDecoder {
    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    public init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    public var isAtEnd: Bool { offset == bytes.count }

    public mutating func integer<T: FixedWidthInteger>(_: T.Type = T.self) throws(WireError) -> T {
        let size = MemoryLayout<T>.size
        guard bytes.count - offset >= size else { throw WireError("frame ends inside a number") }
        let value = T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: T.self))
        offset += size
        return value
    }

    public mutating func string() throws(WireError) -> String {
        let count = Int(try integer(UInt32.self))
        guard bytes.count - offset >= count else { throw WireError("frame ends inside a string") }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[offset..<(offset + count)]), as: UTF8.self)
        offset += count
        return text
    }

    public mutating func event() throws(WireError) -> Event {
        let sequence = try integer(UInt64.self)
        let monotonic = try integer(UInt64.self)
        let wall = Double(bitPattern: try integer(UInt64.self))
        let name = try string()
        let source = try string()
        let count = Int(try integer(UInt32.self))
        // The count is a claim: one the rest of the frame cannot hold is refused, and room is
        // reserved for a few dozen fields at most — a repeated key holds one field, and a
        // dictionary reserved for a claim keeps that room as long as the event lives. Beyond,
        // it grows by doubling as fields are read.
        guard count <= (bytes.count - offset) / EventCodec.minimumFieldBytes else {
            throw WireError("impossible field count \(count): \(bytes.count - offset) bytes left hold at most \((bytes.count - offset) / EventCodec.minimumFieldBytes)")
        }
        var fields: [String: FieldValue] = [:]
        fields.reserveCapacity(min(count, EventCodec.reservedFieldsLimit))
        for _ in 0..<count {
            let key = try string()
            let tag = try integer(UInt8.self)
            switch EventCodec.Tag(rawValue: tag) {
            case .string: fields[key] = .string(try string())
            case .int: fields[key] = .int(try integer(Int64.self))
            case .double: fields[key] = .double(Double(bitPattern: try integer(UInt64.self)))
            case .bool: fields[key] = .bool(try integer(UInt8.self) != 0)
            case .date: fields[key] = .date(Date(timeIntervalSince1970: Double(bitPattern: try integer(UInt64.self))))
            case nil: throw WireError("unknown field tag \(tag)")
            }
        }
        return Event(name: name, source: source, fields: fields,
                     wallTime: Date(timeIntervalSince1970: wall), monotonicNanoseconds: monotonic)
            .withSequence(sequence)
    }
}
