import EventBusKit
import Foundation

/// How an event travels between hosts: the subject carries the origin host and the event name
/// (`<prefix>.<host>.<name>`, so servers filter by both), the payload everything else in a
/// small binary layout.
///
/// Why binary and not JSON: field types must survive exactly — an int stays an int, a double
/// keeps every bit, a date its `Double` — and JSON blurs them (`1` vs `1.0`, dates as text) unless
/// each value is tagged, which makes it both larger and slower. This layout tags each value with
/// one byte, writes numbers as their 8 little-endian bytes and strings with a length prefix;
/// encoding appends into one reused buffer and decoding is one pass. A typical event (3 fields)
/// is ~80 bytes.
///
/// ```
/// u8 version (1) · u64 instance · u64 sequence · f64 wall time (seconds since 2001, bits)
/// string source · varint field count · (string key · u8 tag · value)*
/// tags: 1 string · 2 int (i64) · 3 double (bits) · 4 bool (u8) · 5 date (f64 bits)
/// string = varint length + UTF-8
/// ```
enum WireFormat {
    static let version: UInt8 = 1

    /// The fewest bytes a field takes: a key's length (an empty key), its tag and a one-byte
    /// value (a bool, or an empty string's length).
    static let minimumFieldBytes = 3

    /// The most fields a decoder reserves room for before reading them.
    static let reservedFieldsLimit = 64

    /// The origin and time the payload carries besides the event itself.
    struct Header: Equatable {
        var instance: UInt64
        var sequence: UInt64
    }

    static func encode(_ event: Event, instance: UInt64, into buffer: inout [UInt8]) {
        buffer.removeAll(keepingCapacity: true)
        buffer.append(version)
        appendFixed(instance, to: &buffer)
        appendFixed(event.sequence, to: &buffer)
        appendFixed(event.wallTime.timeIntervalSinceReferenceDate.bitPattern, to: &buffer)
        appendString(event.source, to: &buffer)
        appendVarint(UInt64(event.fields.count), to: &buffer)
        for (key, value) in event.fields {
            appendString(key, to: &buffer)
            switch value {
            case .string(let text):
                buffer.append(1)
                appendString(text, to: &buffer)
            case .int(let number):
                buffer.append(2)
                appendFixed(UInt64(bitPattern: number), to: &buffer)
            case .double(let number):
                buffer.append(3)
                appendFixed(number.bitPattern, to: &buffer)
            case .bool(let flag):
                buffer.append(4)
                buffer.append(flag ? 1 : 0)
            case .date(let date):
                buffer.append(5)
                appendFixed(date.timeIntervalSinceReferenceDate.bitPattern, to: &buffer)
            }
        }
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
    /// Threads: one cache per subject of a core subscription, touched only on its delivery thread.
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
        var reader = Reader(bytes: bytes)
        guard let version = reader.byte(), version == Self.version else {
            throw DecodeError(description: "unknown payload version (expected \(Self.version))")
        }
        guard let instance = reader.fixed(), let sequence = reader.fixed(), let wall = reader.fixed(),
              let source = try reader.string(), let count = reader.varint()
        else { throw DecodeError(description: "truncated header") }
        // The count is a claim: one the rest cannot hold is refused before anything is
        // reserved for it (and the fields dictionary grows with what is read: see decodeFields).
        let most = reader.remaining / minimumFieldBytes
        guard count <= UInt64(most) else {
            throw DecodeError(description: "the payload claims \(count) fields; its last \(reader.remaining) bytes hold at most \(most)")
        }
        let fields: [String: FieldValue]
        if let shape = shapes?.shape, let known = decodeFields(&reader, count: Int(count), like: shape, sequence: sequence, instance: instance) {
            fields = known
        } else {
            fields = try decodeFields(&reader, count: Int(count), host: host, sequence: sequence, instance: instance)
            shapes?.learn(fields)
        }
        let event = Event(name: name, source: source, fields: fields,
                          wallTime: Date(timeIntervalSinceReferenceDate: Double(bitPattern: wall)))
        return Decoded(event: event, header: Header(instance: instance, sequence: sequence))
    }

    /// The fields key by key, origin fields added.
    private static func decodeFields(_ reader: inout Reader, count: Int, host: String, sequence: UInt64,
                                     instance: UInt64) throws(DecodeError) -> [String: FieldValue] {
        // Room for the claimed count only up to a few dozen fields: a payload can claim more
        // fields than it holds (a repeated key holds one), and a dictionary reserved for a
        // claim keeps that room as long as the event lives (replay buffer, clients' buffers).
        // Beyond, it grows by doubling as fields are read: linear all the same.
        var fields: [String: FieldValue] = Dictionary(minimumCapacity: min(count, reservedFieldsLimit) + 3)
        for _ in 0..<count {
            guard let key = try reader.string(), let tag = reader.byte() else { throw DecodeError(description: "truncated field") }
            fields[key] = try reader.value(tag: tag, key: key)
        }
        guard reader.isAtEnd else { throw DecodeError(description: "trailing bytes") }
        fields[EventOrigin.hostField] = .string(host)
        fields[EventOrigin.sequenceField] = .int(Int64(bitPattern: sequence))
        fields[EventOrigin.instanceField] = .int(Int64(bitPattern: instance))
        return fields
    }

    /// The fields set by index into `shape`'s template, or nil — the reader back where it
    /// was — unless the payload has exactly the shape's keys (each once) and is well formed.
    private static func decodeFields(_ reader: inout Reader, count: Int, like shape: ShapeCache.Shape,
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

    private static func appendFixed(_ value: UInt64, to buffer: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { buffer.append(contentsOf: $0) }
    }

    private static func appendVarint(_ value: UInt64, to buffer: inout [UInt8]) {
        var rest = value
        while rest >= 0x80 {
            buffer.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        buffer.append(UInt8(rest))
    }

    private static func appendString(_ text: String, to buffer: inout [UInt8]) {
        var text = text
        text.withUTF8 { utf8 in
            appendVarint(UInt64(utf8.count), to: &buffer)
            buffer.append(contentsOf: utf8)
        }
    }

    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var offset = 0

        var isAtEnd: Bool { offset == bytes.count }
        var remaining: Int { bytes.count - offset }

        mutating func byte() -> UInt8? {
            guard offset < bytes.count else { return nil }
            defer { offset += 1 }
            return bytes[offset]
        }

        mutating func fixed() -> UInt64? {
            guard bytes.count - offset >= 8 else { return nil }
            var value: UInt64 = 0
            withUnsafeMutableBytes(of: &value) { $0.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + 8])) }
            offset += 8
            return UInt64(littleEndian: value)
        }

        mutating func varint() -> UInt64? {
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

        /// A string, nil when the payload ends inside it; bytes that are not UTF-8 are an
        /// error, as a local post cannot carry them (the control socket's JSON refuses them),
        /// where decoding them would replace them with U+FFFD unsaid.
        mutating func string() throws(DecodeError) -> String? {
            guard let bytes = utf8() else { return nil }
            guard let text = bytes.withMemoryRebound(to: UInt8.self, { String(validating: $0, as: UTF8.self) }) else {
                throw DecodeError(description: "text that is not UTF-8")
            }
            return text
        }

        /// A string's UTF-8, not made into a `String`.
        mutating func utf8() -> UnsafeRawBufferPointer? {
            guard let length = varint(), UInt64(bytes.count - offset) >= length else { return nil }
            let slice = UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + Int(length)])
            offset += Int(length)
            return slice
        }

        /// The value after a type tag; `key` names it in errors.
        mutating func value(tag: UInt8, key: String) throws(DecodeError) -> FieldValue {
            let value: FieldValue?
            switch tag {
            case 1: value = try string().map(FieldValue.string)
            case 2: value = fixed().map { .int(Int64(bitPattern: $0)) }
            case 3: value = fixed().map { .double(Double(bitPattern: $0)) }
            case 4: value = byte().map { .bool($0 != 0) }
            case 5: value = fixed().map { .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: $0))) }
            default: throw DecodeError(description: "field \(key): unknown type tag \(tag)")
            }
            guard let value else { throw DecodeError(description: "field \(key): truncated value") }
            return value
        }
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
