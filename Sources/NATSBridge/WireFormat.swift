import EventBusKit
import EventFieldCoding
import Foundation

/// How an event travels between hosts: the subject carries the origin host and the event name
/// (`<prefix>.<host>.<name>`, so servers filter by both), the payload everything else in a
/// small binary layout.
///
/// The fields are in the one binary encoding events have outside a process
/// (``EventFieldCoding``, shared with the module workers' frames), after a small header. A
/// typical event (3 fields) is ~80 bytes.
///
/// ```
/// u8 version (1) · u64 instance · u64 sequence · f64 wall time (seconds since 2001, bits)
/// string source · fields (EventFieldCoding)
/// string = varint length + UTF-8
/// ```
enum WireFormat {
    static let version: UInt8 = 1

    /// The origin and time the payload carries besides the event itself.
    struct Header: Equatable {
        var instance: UInt64
        var sequence: UInt64
    }

    static func encode(_ event: Event, instance: UInt64, into buffer: inout [UInt8]) {
        buffer.removeAll(keepingCapacity: true)
        buffer.append(version)
        EventFieldCoding.appendFixed(instance, to: &buffer)
        EventFieldCoding.appendFixed(event.sequence, to: &buffer)
        EventFieldCoding.appendFixed(event.wallTime.timeIntervalSinceReferenceDate.bitPattern, to: &buffer)
        EventFieldCoding.appendString(event.source, to: &buffer)
        EventFieldCoding.append(event.fields, to: &buffer)
    }

    struct DecodeError: Error, CustomStringConvertible {
        var description: String
    }

    /// What ``decode(_:name:host:shapes:)`` makes of a payload. A struct, not a tuple: a tuple result
    /// of this throwing function had its metadata looked up at run time on every call.
    struct Decoded {
        var event: Event
        var header: Header
    }

    /// The field keys of the last payload decoded on one subject, and its fields dictionary (the
    /// origin fields included) as a template: a payload with the same keys — in any order, of
    /// any types — copies the template, which keeps its storage's seed and layout, and sets
    /// each value by its index, hashing no key. Building the dictionary key by key cost five
    /// SipHash runs per event (three for the origin fields), the largest part of decoding.
    /// The host is fixed per subject, so the template already holds it.
    ///
    /// It keeps keys, never values: the template's values are placeholders (every one is set
    /// anew for each payload), or each subject would pin its last event — a megabyte string
    /// field per subject, thousands of subjects. A shape whose keys take more than
    /// ``keyBytesLimit`` is not kept (such payloads are decoded key by key).
    ///
    /// Threads: one cache per subject of a core subscription (touched only on its delivery
    /// thread) or of the durable importer (its thread) — see ``ImportRoutes``.
    final class ShapeCache {
        /// UTF-8 bytes of keys a shape keeps at most.
        static let keyBytesLimit = 1_024

        fileprivate struct Shape {
            /// UTF-8 of each key other than the origin fields, with its index in `template`.
            var keys: [[UInt8]]
            var indices: [Dictionary<String, FieldValue>.Index]
            var template: [String: FieldValue]
            var sequenceIndex: Dictionary<String, FieldValue>.Index
            var instanceIndex: Dictionary<String, FieldValue>.Index
        }

        fileprivate var shape: Shape?

        init() {}

        /// What the cached shape pins: the UTF-8 of its keys (kept twice) and of the string
        /// values in its template (the host's alone, as values are placeholders).
        var pinnedBytes: Int {
            guard let shape else { return 0 }
            return shape.keys.reduce(0) { $0 + $1.count } + shape.template.reduce(0) { total, field in
                if case .string(let text) = field.value { total + field.key.utf8.count + text.utf8.count } else { total + field.key.utf8.count }
            }
        }
    }

    /// The event a payload describes, named `name`, with its origin fields added; the header.
    /// With `shapes`, a payload shaped like the previous one on its subject skips hashing keys.
    static func decode(_ bytes: UnsafeRawBufferPointer, name: String, host: String,
                       shapes: ShapeCache? = nil) throws(DecodeError) -> Decoded {
        var reader = FieldReader(bytes)
        guard let version = reader.byte(), version == Self.version else {
            throw DecodeError(description: "unknown payload version (expected \(Self.version))")
        }
        let fields: [String: FieldValue], instance: UInt64, sequence: UInt64, wall: UInt64, source: String
        do throws(FieldDecodingError) {
            guard let fixedInstance = reader.fixed(), let fixedSequence = reader.fixed(), let fixedWall = reader.fixed(),
                  let text = try reader.string()
            else { throw FieldDecodingError("truncated header") }
            (instance, sequence, wall, source) = (fixedInstance, fixedSequence, fixedWall, text)
            // The count is a claim: one the rest cannot hold is refused before anything is
            // reserved for it, and the fields dictionary grows with what is read.
            let count = try reader.fieldCount()
            if let shape = shapes?.shape, let known = decodeFields(&reader, count: count, like: shape, sequence: sequence, instance: instance) {
                fields = known
            } else {
                fields = try decodeFields(&reader, count: count, host: host, sequence: sequence, instance: instance)
                shapes?.learn(fields)
            }
        } catch {
            throw DecodeError(description: error.description)
        }
        let event = Event(name: name, source: source, fields: fields,
                          wallTime: Date(timeIntervalSinceReferenceDate: Double(bitPattern: wall)))
        return Decoded(event: event, header: Header(instance: instance, sequence: sequence))
    }

    /// The fields key by key, origin fields added.
    private static func decodeFields(_ reader: inout FieldReader, count: Int, host: String, sequence: UInt64,
                                     instance: UInt64) throws(FieldDecodingError) -> [String: FieldValue] {
        var fields = try reader.fields(count: count, extra: 3)
        guard reader.isAtEnd else { throw FieldDecodingError("trailing bytes") }
        fields[EventOrigin.hostField] = .string(host)
        fields[EventOrigin.sequenceField] = .int(Int64(bitPattern: sequence))
        fields[EventOrigin.instanceField] = .int(Int64(bitPattern: instance))
        return fields
    }

    /// The fields set by index into `shape`'s template, or nil — the reader back where it
    /// was — unless the payload has exactly the shape's keys (each once) and is well formed.
    private static func decodeFields(_ reader: inout FieldReader, count: Int, like shape: ShapeCache.Shape,
                                     sequence: UInt64, instance: UInt64) -> [String: FieldValue]? {
        guard count == shape.keys.count, count <= 64 else { return nil }
        var fast = reader
        var fields = shape.template
        var seen: UInt64 = 0
        for _ in 0..<count {
            guard let key = fast.utf8(), let tag = fast.byte() else { return nil }
            guard let slot = shape.keys.indices.first(where: { slot in
                seen & (1 << slot) == 0 && shape.keys[slot].withUnsafeBytes { $0.count == key.count && memcmp($0.baseAddress!, key.baseAddress!, key.count) == 0 }
            }) else { return nil }
            guard let value = try? fast.value(tag: tag, key: "") else { return nil }
            seen |= 1 << slot
            fields.values[shape.indices[slot]] = value
        }
        guard fast.isAtEnd else { return nil }
        fields.values[shape.sequenceIndex] = .int(Int64(bitPattern: sequence))
        fields.values[shape.instanceIndex] = .int(Int64(bitPattern: instance))
        reader = fast
        return fields
    }
}

extension WireFormat.ShapeCache {
    /// Keeps `fields` (just decoded key by key) as the template for the next payloads.
    fileprivate func learn(_ fields: [String: FieldValue]) {
        shape = nil
        guard let sequenceIndex = fields.index(forKey: EventOrigin.sequenceField),
              let instanceIndex = fields.index(forKey: EventOrigin.instanceField) else { return }
        var keys: [[UInt8]] = []
        var indices: [Dictionary<String, FieldValue>.Index] = []
        var keyBytes = 0
        for index in fields.indices {
            let key = fields.keys[index]
            guard key != EventOrigin.hostField, key != EventOrigin.sequenceField, key != EventOrigin.instanceField else { continue }
            keyBytes += key.utf8.count
            guard keyBytes <= Self.keyBytesLimit, keys.count < 64 else { return }  // 64: the most the fast path takes
            keys.append(Array(key.utf8))
            indices.append(index)
        }
        // A copy keeps the storage's layout, so the indices hold; only the values are replaced.
        var template = fields
        for index in indices { template.values[index] = .bool(false) }
        shape = Shape(keys: keys, indices: indices, template: template, sequenceIndex: sequenceIndex, instanceIndex: instanceIndex)
    }
}

/// Subjects: `<prefix>.<host>.<event name>`. Event names already follow NATS subject syntax
/// (``EventPattern``), so a bus pattern P becomes the subject filter `<prefix>.*.P` and the
/// server does the matching.
struct Subjects: Sendable {
    let prefix: String
    let host: String
    /// `<prefix>.<host>.`, what this host's own subjects begin with.
    let ownPrefix: String

    init(prefix: String, host: String) {
        self.prefix = prefix
        self.host = host
        self.ownPrefix = prefix + "." + host + "."
    }

    func subject(for name: String) -> String { ownPrefix + name }

    /// The filter that selects every host's events matching `pattern`.
    func filter(for pattern: EventPattern) -> String { prefix + ".*." + pattern.description }

    /// Everything under the prefix: the stream's subjects.
    var all: String { prefix + ".>" }

    /// (host, event name) of a subject under the prefix, or nil for a foreign subject.
    func split(_ subject: String) -> (host: Substring, name: Substring)? {
        let utf8 = subject.utf8
        guard utf8.count > prefix.utf8.count + 1, subject.hasPrefix(prefix),
              utf8[utf8.index(utf8.startIndex, offsetBy: prefix.utf8.count)] == UInt8(ascii: ".")
        else { return nil }
        let rest = subject.utf8.dropFirst(prefix.utf8.count + 1)
        guard let dot = rest.firstIndex(of: UInt8(ascii: ".")) else { return nil }
        let host = Substring(rest[rest.startIndex..<dot])
        let name = Substring(rest[rest.index(after: dot)...])
        guard !host.isEmpty, !name.isEmpty else { return nil }
        return (host, name)
    }
}

/// The payload codec, for `eventbus-bench wide` (its cost per field): not an API.
@_spi(Benchmarks) public enum WireFormatBenchmark {
    public static func encode(_ event: Event, into buffer: inout [UInt8]) {
        WireFormat.encode(event, instance: 1, into: &buffer)
    }

    /// The fields of the event `payload` decodes to (origin fields included); 0 when it does not.
    public static func decodedFieldCount(_ payload: UnsafeRawBufferPointer, name: String) -> Int {
        (try? WireFormat.decode(payload, name: name, host: "bench").event.fields.count) ?? 0
    }
}
