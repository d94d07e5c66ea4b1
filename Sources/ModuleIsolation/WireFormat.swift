import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation

/// The frames a host and its module worker exchange over their socketpair.
///
/// A frame is `length: UInt32 LE` (of what follows), `type: UInt8`, then the payload. Events travel
/// in *batched* frames: ``FrameType/events`` (host → worker) and ``FrameType/posts`` (worker →
/// host) hold a count and that many binary events (``EventCodec``); a sender appends to the last
/// frame while it is still waiting to be written, so a burst is one frame and one `write`.
/// Everything else is rare and small, and is one JSON object (the control protocol's ``JSON``).
public enum FrameType: UInt8, Sendable {
    // Host → worker.
    /// `{module, path, config, kinds, heartbeat_ms, window, limits}`: load and activate.
    case start = 1
    /// Count, then `(subscription: UInt64, event)` each.
    case events = 2
    /// `{config}`: call the module's `reconfigure`.
    case reconfigure = 3
    /// Empty: deliver what was sent, call `deactivate`, cancel, answer ``deactivated``.
    case deactivate = 4
    /// `{id, error?}`: the outcome of an ``acknowledge``.
    case acknowledged = 5

    // Worker → host.
    /// `{name, version}` or `{error, kind}`.
    case activated = 20
    /// `{id, patterns, source?}` (``SourceSpec``).
    case subscribe = 21
    /// `{id}`.
    case cancel = 22
    /// Count, then events each.
    case posts = 23
    /// `{level, message}`.
    case log = 24
    /// `{id, source, cursor, sequence}`.
    case acknowledge = 25
    /// `consumed: UInt64, errors: UInt64`: events the module has handled and handler errors so
    /// far. Made on the module's queue, so it is also the heartbeat.
    case progress = 26
    /// `{result: applied|reactivate|threw, message?}`.
    case reconfigured = 27
    /// Empty.
    case deactivated = 28
}

/// Appends frames to a byte buffer.
public struct FrameBuffer {
    public private(set) var bytes: [UInt8] = []
    /// Where the last frame starts, and its type: a batched frame there can take more events.
    private var lastFrame: (offset: Int, type: FrameType)?

    public init() {}

    public var isEmpty: Bool { bytes.isEmpty }
    public var count: Int { bytes.count }

    /// Takes the bytes, leaving an empty buffer that keeps its capacity.
    public mutating func take(into other: inout [UInt8]) {
        swap(&bytes, &other)
        bytes.removeAll(keepingCapacity: true)
        lastFrame = nil
    }

    /// A frame with a JSON payload.
    public mutating func append(_ type: FrameType, json: JSON) {
        var writer = JSONWriter()
        writer.value(json)
        append(type, payload: writer.bytes)
    }

    public mutating func append(_ type: FrameType, payload: [UInt8]) {
        let start = bytes.count
        bytes.appendLittleEndian(UInt32(1 + payload.count))
        bytes.append(type.rawValue)
        bytes.append(contentsOf: payload)
        lastFrame = (start, type)
    }

    /// A ``FrameType/progress`` frame.
    public mutating func appendProgress(consumed: UInt64, errors: UInt64) {
        let start = bytes.count
        bytes.appendLittleEndian(UInt32(17))
        bytes.append(FrameType.progress.rawValue)
        bytes.appendLittleEndian(consumed)
        bytes.appendLittleEndian(errors)
        lastFrame = (start, .progress)
    }

    /// Adds one event to the batched frame of `type` at the end, or starts one. `subscription`
    /// is written for ``FrameType/events`` only.
    public mutating func appendEvent(_ event: Event, type: FrameType, subscription: UInt64) {
        let start: Int
        if let last = lastFrame, last.type == type {
            start = last.offset
        } else {
            start = bytes.count
            bytes.appendLittleEndian(UInt32(5))  // type + count so far
            bytes.append(type.rawValue)
            bytes.appendLittleEndian(UInt32(0))
            lastFrame = (start, type)
        }
        let before = bytes.count
        if type == .events { bytes.appendLittleEndian(subscription) }
        EventCodec.encode(event, into: &bytes)
        let added = UInt32(bytes.count - before)
        bytes.withUnsafeMutableBytes { raw in
            let length = raw.loadUnaligned(fromByteOffset: start, as: UInt32.self).littleEndian
            raw.storeBytes(of: (length + added).littleEndian, toByteOffset: start, as: UInt32.self)
            let countOffset = start + 5
            let count = raw.loadUnaligned(fromByteOffset: countOffset, as: UInt32.self).littleEndian
            raw.storeBytes(of: (count + 1).littleEndian, toByteOffset: countOffset, as: UInt32.self)
        }
    }
}

/// Cuts frames out of the bytes read from a socket.
public struct FrameReader {
    private var buffer: [UInt8] = []
    private var start = 0
    /// Frames longer than this are a protocol error (a corrupt or hostile peer), not an allocation.
    public static let maximumFrame = 64 << 20

    public init() {}

    /// Reads once from `fd` into the buffer. Returns false at end of file or on an error.
    public mutating func fill(from fd: Int32) -> Bool {
        if start > 0 && start == buffer.count {
            buffer.removeAll(keepingCapacity: true)
            start = 0
        } else if start > 1 << 20 {
            buffer.removeSubrange(0..<start)
            start = 0
        }
        let chunk = 256 * 1024
        let old = buffer.count
        buffer.reserveCapacity(old + chunk)
        buffer.append(contentsOf: repeatElement(0, count: chunk))
        let got = buffer.withUnsafeMutableBytes { raw -> Int in
            while true {
                let n = read(fd, raw.baseAddress! + old, chunk)
                if n < 0 && errno == EINTR { continue }
                return n
            }
        }
        buffer.removeLast(chunk - max(0, got))
        return got > 0
    }

    public enum Next {
        case frame(FrameType, [UInt8])
        case needMore
        case malformed(String)
    }

    /// The next whole frame in the buffer, if there is one.
    public mutating func next() -> Next {
        guard buffer.count - start >= 5 else { return .needMore }
        let length = buffer.withUnsafeBytes { Int($0.loadUnaligned(fromByteOffset: start, as: UInt32.self).littleEndian) }
        guard length >= 1, length <= Self.maximumFrame else { return .malformed("frame length \(length)") }
        guard buffer.count - start >= 4 + length else { return .needMore }
        let typeByte = buffer[start + 4]
        guard let type = FrameType(rawValue: typeByte) else { return .malformed("unknown frame type \(typeByte)") }
        let payload = Array(buffer[(start + 5)..<(start + 4 + length)])
        start += 4 + length
        return .frame(type, payload)
    }
}

/// Why a frame could not be read.
public struct WireError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension JSON {
    /// A JSON frame's payload.
    public static func frame(_ payload: [UInt8]) throws(WireError) -> JSON {
        do {
            return try payload.withUnsafeBufferPointer { buffer throws(JSONParseError) in try JSON.parse(buffer) }
        } catch {
            throw WireError("malformed JSON frame: \(error)")
        }
    }
}

extension Array where Element == UInt8 {
    @inline(__always)
    mutating func appendLittleEndian<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.littleEndian) { append(contentsOf: $0) }
    }
}
