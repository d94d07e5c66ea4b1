import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation
import SystemCalls

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
    /// `consumed: UInt64, errors: UInt64`: items of ``events`` frames (events and gap notices)
    /// the module has handled, and handler errors, so far. Made on the module's queue, so it is
    /// also the heartbeat; the host counts what it sent against the module's mailbox bounds
    /// until this says it was handled.
    case progress = 26
    /// `{result: applied|reactivate|threw, message?}`.
    case reconfigured = 27
    /// Empty.
    case deactivated = 28
    /// Count, then that many `Int64` nanoseconds: the module's timed handler calls since the last
    /// such frame (sent only when the host asked for them: `time_handlers` in ``start``).
    case handlerDurations = 29
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

    /// Moves `other`'s frames to the end of this buffer (`other` keeps its capacity).
    public mutating func append(contentsOf other: inout FrameBuffer) {
        guard !other.bytes.isEmpty else { return }
        if bytes.isEmpty {
            swap(&bytes, &other.bytes)
            lastFrame = other.lastFrame
        } else {
            let offset = bytes.count
            bytes.append(contentsOf: other.bytes)
            lastFrame = other.lastFrame.map { (offset + $0.offset, $0.type) }
        }
        other.removeAll()
    }

    /// Empties the buffer, keeping its capacity.
    public mutating func removeAll() {
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

    /// A ``FrameType/handlerDurations`` frame.
    public mutating func appendHandlerDurations(_ durations: [Int64]) {
        let start = bytes.count
        bytes.appendLittleEndian(UInt32(5 + 8 * durations.count))
        bytes.append(FrameType.handlerDurations.rawValue)
        bytes.appendLittleEndian(UInt32(durations.count))
        for duration in durations { bytes.appendLittleEndian(duration) }
        lastFrame = (start, .handlerDurations)
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
///
/// One buffer, reused: a read goes straight into its free space (no zero-filling, no copy per
/// frame); a frame's payload is handed out as a view into it, valid until the next read.
public final class FrameReader {
    private var storage: UnsafeMutableRawPointer
    private var capacity: Int
    private var start = 0
    private var end = 0
    /// Frames longer than this are a protocol error (a corrupt or hostile peer), not an allocation.
    public static let maximumFrame = 64 << 20
    private static let readSize = 256 * 1024

    public init() {
        capacity = 1 << 20
        storage = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { storage.deallocate() }

    /// Reads once from `fd` into the buffer. Returns false at end of file or on an error.
    public func fill(from fd: Int32) -> Bool {
        if start == end {
            start = 0
            end = 0
        }
        if capacity - end < Self.readSize {
            // Move the unread bytes to the front; grow if a long frame needs more room.
            let unread = end - start
            if unread + Self.readSize > capacity {
                let grown = UnsafeMutableRawPointer.allocate(byteCount: max(capacity * 2, unread + Self.readSize), alignment: 16)
                grown.copyMemory(from: storage + start, byteCount: unread)
                storage.deallocate()
                storage = grown
                capacity = max(capacity * 2, unread + Self.readSize)
            } else if start > 0 {
                memmove(storage, storage + start, unread)
            }
            start = 0
            end = unread
        }
        // End of file or a failed read: either way no more frames come.
        guard let n = try? System.read(fd, into: UnsafeMutableRawBufferPointer(start: storage + end, count: capacity - end)), n > 0 else { return false }
        end += n
        return true
    }

    public enum Next {
        /// The payload is valid until the next call to ``fill(from:)``.
        case frame(FrameType, UnsafeRawBufferPointer)
        case needMore
        case malformed(String)
    }

    /// The next whole frame in the buffer, if there is one.
    public func next() -> Next {
        guard end - start >= 5 else { return .needMore }
        let length = Int(UInt32(littleEndian: (storage + start).loadUnaligned(as: UInt32.self)))
        guard length >= 1, length <= Self.maximumFrame else { return .malformed("frame length \(length)") }
        guard end - start >= 4 + length else { return .needMore }
        let typeByte = (storage + start + 4).load(as: UInt8.self)
        guard let type = FrameType(rawValue: typeByte) else { return .malformed("unknown frame type \(typeByte)") }
        let payload = UnsafeRawBufferPointer(start: storage + start + 5, count: length - 1)
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
    public static func frame(_ payload: UnsafeRawBufferPointer) throws(WireError) -> JSON {
        do {
            return try JSON.parse(payload.assumingMemoryBound(to: UInt8.self))
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

/// A config section refused by the module's declaration, as the worker reports it in its
/// ``FrameType/activated`` or ``FrameType/reconfigured`` reply: `config_problems` (each `{path,
/// message}`) and `config_keys` (what the module reads). The host adds file and line.
public enum ConfigProblemsWire {
    public static func encode(_ problems: [ModuleConfigProblem], keysSummary: String) -> [String: JSON] {
        ["config_problems": .array(problems.map { problem in
            ["path": .array(problem.path.map(JSON.string)), "message": .string(problem.message)]
        }), "config_keys": .string(keysSummary)]
    }

    public static func decode(_ reply: JSON) -> (problems: [ModuleConfigProblem], keysSummary: String)? {
        guard let items = reply["config_problems"]?.arrayValue else { return nil }
        let problems = items.map { item in
            ModuleConfigProblem(path: (item["path"]?.arrayValue ?? []).compactMap(\.stringValue),
                                message: item["message"]?.stringValue ?? "refused")
        }
        return (problems, reply["config_keys"]?.stringValue ?? "")
    }
}
