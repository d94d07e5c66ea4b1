@_spi(EventBusHost) import EventBusKit
import EventFieldCoding
import Foundation

/// The binary form of an ``Event`` on the worker socket: its header — `sequence: u64,
/// monotonic: u64, wall: f64 (seconds since 1970), name, source` — then its fields, all in the
/// encoding the NATS bridge's payload uses (``EventFieldCoding``: varint lengths, a tag per
/// ``FieldValue`` case, so an int stays an int and a bool a bool, which JSON would blur). Why
/// binary: a worker receives hundreds of thousands of events a second; this is a few appends
/// per event where JSON text costs escaping and number formatting.
public enum EventCodec {
    public static func encode(_ event: Event, into bytes: inout [UInt8]) {
        EventFieldCoding.appendFixed(event.sequence, to: &bytes)
        EventFieldCoding.appendFixed(event.monotonicNanoseconds, to: &bytes)
        EventFieldCoding.appendFixed(event.wallTime.timeIntervalSince1970.bitPattern, to: &bytes)
        EventFieldCoding.appendString(event.name, to: &bytes)
        EventFieldCoding.appendString(event.source, to: &bytes)
        EventFieldCoding.append(event.fields, to: &bytes)
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

    /// An event as ``EventCodec`` wrote it. Its text must be UTF-8 and its field count one
    /// the rest of the frame can hold: the worker is another process, running a module's code.
    public mutating func event() throws(WireError) -> Event {
        var reader = FieldReader(bytes, offset: offset)
        do throws(FieldDecodingError) {
            guard let sequence = reader.fixed(), let monotonic = reader.fixed(), let wall = reader.fixed(),
                  let name = try reader.string(), let source = try reader.string()
            else { throw FieldDecodingError("frame ends inside an event's header") }
            let fields = try reader.fields(count: try reader.fieldCount())
            offset = reader.offset
            return Event(name: name, source: source, fields: fields,
                         wallTime: Date(timeIntervalSince1970: Double(bitPattern: wall)), monotonicNanoseconds: monotonic)
                .withSequence(sequence)
        } catch {
            throw WireError("event: \(error.description)")
        }
    }
}
