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
/// u8 version (3) · u64 instance · u64 sequence · u64 previous · u64 number
/// f64 wall time (seconds since 2001, bits) · string source · fields (EventFieldCoding)
/// string = varint length + UTF-8
/// ```
///
/// `previous` is the sequence of the export its origin published before this one in the same
/// instance (durable mode), 0 for none or unknown (its first export; core mode): it lets an
/// importer tell that an event was stored ahead of an earlier one (``OriginOrder``). `number`
/// numbers the instance's exports of the event's name, 1, 2, 3… (``ExportNumbers``): a core
/// importer receives every export of the names it imports, so a jump counts the exports it
/// missed (``ReceivedNumbers``). Versions 1 and 2 (without `previous`, or without `number`) are
/// still read, as 0 for what they lack, so a fleet can be upgraded host by host, importers first:
/// a host that reads version 2 at most refuses version 3 (`import_refused`).
enum WireFormat {
    static let version: UInt8 = 3

    /// The origin and order the payload carries besides the event itself.
    struct Header: Equatable {
        var instance: UInt64
        var sequence: UInt64
        var previous: UInt64 = 0
        /// The export's number among its instance's exports of its name; 0: not numbered.
        var number: UInt64 = 0
    }

    /// The payload of `event`, in place of what `buffer` held; `previous` and `number` as above.
    static func encode(_ event: Event, instance: UInt64, previous: UInt64 = 0, number: UInt64 = 0, into buffer: inout FieldWriter) {
        buffer.removeAll()
        buffer.byte(version)
        buffer.fixed(instance)
        buffer.fixed(event.sequence)
        buffer.fixed(previous)
        buffer.fixed(number)
        buffer.fixed(event.wallTime.timeIntervalSinceReferenceDate.bitPattern)
        buffer.string(event.source)
        buffer.fields(event.fields)
    }

    struct DecodeError: Error, CustomStringConvertible {
        var description: String
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
        /// Keys a shape keeps at most: which of them a payload has named is a bit of a word.
        static let keyLimit = 64

        /// A class, so that reading it per payload is one reference, not a copy of its arrays.
        fileprivate final class Shape {
            /// The UTF-8 of each key other than the origin fields, one after another: key `i`
            /// is `keyBytes[keyStarts[i]..<keyStarts[i + 1]]`.
            let keyBytes: [UInt8]
            let keyStarts: [Int]
            /// Where key `i`'s value is in `template`.
            let indices: [Dictionary<String, FieldValue>.Index]
            let template: [String: FieldValue]
            let sequenceIndex: Dictionary<String, FieldValue>.Index
            let instanceIndex: Dictionary<String, FieldValue>.Index

            init(keyBytes: [UInt8], keyStarts: [Int], indices: [Dictionary<String, FieldValue>.Index], template: [String: FieldValue],
                 sequenceIndex: Dictionary<String, FieldValue>.Index, instanceIndex: Dictionary<String, FieldValue>.Index) {
                self.keyBytes = keyBytes
                self.keyStarts = keyStarts
                self.indices = indices
                self.template = template
                self.sequenceIndex = sequenceIndex
                self.instanceIndex = instanceIndex
            }

            var keyCount: Int { indices.count }

            /// The key equal to `key` among those not in `named` (a bit per key), or nil.
            func slot(of key: UnsafeRawBufferPointer, notIn named: UInt64) -> Int? {
                keyBytes.withUnsafeBytes { known in
                    keyStarts.withUnsafeBufferPointer { starts in
                        for slot in 0..<indices.count where named & (1 << slot) == 0 {
                            let start = starts[slot]
                            guard starts[slot + 1] - start == key.count else { continue }
                            if key.isEmpty || memcmp(known.baseAddress! + start, key.baseAddress!, key.count) == 0 { return slot }
                        }
                        return nil
                    }
                }
            }
        }

        fileprivate var shape: Shape?

        /// The source of the last payload, and its UTF-8: a subject's events mostly come from
        /// one source, and reading it again as a `String` was a twentieth of a core import
        /// thread's time. Kept only up to ``sourceBytesLimit``, so a subject pins no large text.
        fileprivate var source: String?
        fileprivate var sourceBytes: [UInt8] = []
        static let sourceBytesLimit = 64

        init() {}

        /// The source at `reader`: the last payload's `String` when the bytes are the same.
        fileprivate func readSource(_ reader: inout FieldReader) throws(FieldDecodingError) -> String? {
            var peek = reader
            guard let bytes = peek.utf8() else { return nil }
            if let source, bytes.count == sourceBytes.count,
               bytes.isEmpty || sourceBytes.withUnsafeBytes({ memcmp($0.baseAddress!, bytes.baseAddress!, bytes.count) == 0 }) {
                reader = peek
                return source
            }
            let text = try reader.string()
            if bytes.count <= Self.sourceBytesLimit {
                source = text
                sourceBytes = Array(bytes)
            }
            return text
        }

        /// What the cached shape pins: the UTF-8 of its keys (kept twice) and of the string
        /// values in its template (the host's alone, as values are placeholders), and the last
        /// source (twice).
        var pinnedBytes: Int {
            guard let shape else { return 2 * sourceBytes.count }
            return 2 * sourceBytes.count + shape.keyBytes.count + shape.template.reduce(0) { total, field in
                if case .string(let text) = field.value { total + field.key.utf8.count + text.utf8.count } else { total + field.key.utf8.count }
            }
        }
    }

    /// The event a payload describes, named `name`, with its origin fields added; its header
    /// into `header`. With `shapes`, a payload shaped like the previous one on its subject skips
    /// hashing keys. (The event is the result and the header an argument, not both a result:
    /// a struct holding the event, copied into the importer's batch and destroyed, cost a
    /// retain and a release of the fields per event.)
    static func decode(_ bytes: UnsafeRawBufferPointer, name: String, host: String, shapes: ShapeCache? = nil,
                       header: inout Header) throws(DecodeError) -> Event {
        var reader = FieldReader(bytes)
        let fields: [String: FieldValue], wall: UInt64, source: String
        let origin = try readOrigin(&reader)
        let (instance, sequence) = (origin.instance, origin.sequence)
        do throws(FieldDecodingError) {
            let fixedWall = reader.fixed()
            let text = if let shapes { try shapes.readSource(&reader) } else { try reader.string() }
            guard let fixedWall, let text else { throw FieldDecodingError("truncated header") }
            (wall, source) = (fixedWall, text)
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
        header = origin
        return Event(name: name, source: source, fields: fields, wallTime: Date(timeIntervalSinceReferenceDate: Double(bitPattern: wall)))
    }

    /// The origin's part of a payload's header alone — all an importer needs of an event it does
    /// not post, to follow its origin's order.
    static func header(_ bytes: UnsafeRawBufferPointer) throws(DecodeError) -> Header {
        var reader = FieldReader(bytes)
        return try readOrigin(&reader)
    }

    private static func readOrigin(_ reader: inout FieldReader) throws(DecodeError) -> Header {
        guard let version = reader.byte(), (1...Self.version).contains(version) else {
            throw DecodeError(description: "unknown payload version (expected 1 to \(Self.version))")
        }
        guard let instance = reader.fixed(), let sequence = reader.fixed() else { throw DecodeError(description: "truncated header") }
        var header = Header(instance: instance, sequence: sequence)
        if version >= 2 {
            guard let previous = reader.fixed() else { throw DecodeError(description: "truncated header") }
            header.previous = previous
        }
        if version >= 3 {
            guard let number = reader.fixed() else { throw DecodeError(description: "truncated header") }
            header.number = number
        }
        return header
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
        guard count == shape.keyCount else { return nil }
        var fast = reader
        var fields = shape.template
        var named: UInt64 = 0
        for _ in 0..<count {
            guard let key = fast.utf8(), let tag = fast.byte(), let slot = shape.slot(of: key, notIn: named),
                  let value = try? fast.value(tag: tag, key: "") else { return nil }
            named |= 1 << slot
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
        var keyBytes: [UInt8] = []
        var keyStarts: [Int] = [0]
        var indices: [Dictionary<String, FieldValue>.Index] = []
        for index in fields.indices {
            let key = fields.keys[index]
            guard key != EventOrigin.hostField, key != EventOrigin.sequenceField, key != EventOrigin.instanceField else { continue }
            guard keyBytes.count + key.utf8.count <= Self.keyBytesLimit, indices.count < Self.keyLimit else { return }
            keyBytes.append(contentsOf: key.utf8)
            keyStarts.append(keyBytes.count)
            indices.append(index)
        }
        // A copy keeps the storage's layout, so the indices hold; only the values are replaced.
        var template = fields
        for index in indices { template.values[index] = .bool(false) }
        shape = Shape(keyBytes: keyBytes, keyStarts: keyStarts, indices: indices, template: template,
                      sequenceIndex: sequenceIndex, instanceIndex: instanceIndex)
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
    public static func encode(_ event: Event, into buffer: inout FieldWriter) {
        WireFormat.encode(event, instance: 1, into: &buffer)
    }

    /// The fields of the event `payload` decodes to (origin fields included); 0 when it does not.
    public static func decodedFieldCount(_ payload: UnsafeRawBufferPointer, name: String) -> Int {
        var header = WireFormat.Header(instance: 0, sequence: 0)
        return (try? WireFormat.decode(payload, name: name, host: "bench", header: &header).fields.count) ?? 0
    }
}
