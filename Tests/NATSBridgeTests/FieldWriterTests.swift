import EventBusKit
import EventFieldCoding
import Foundation
@testable import NATSBridge
import Testing

/// ``FieldWriter`` (the exporter's encoder) writes exactly what ``EventFieldCoding``'s array
/// functions write — the layout other hosts and the module workers read — for every kind of
/// value, for lengths whose varint takes one, two or three bytes, and across its growth.
@Suite struct FieldWriterTests {
    /// What the array codec writes for `fields`.
    static func codec(_ fields: [String: FieldValue]) -> [UInt8] {
        var bytes: [UInt8] = []
        EventFieldCoding.append(fields, to: &bytes)
        return bytes
    }

    static let samples: [[String: FieldValue]] = [
        [:],
        ["n": .int(1)],
        ["negative": .int(-1), "min": .int(.min), "max": .int(.max)],
        ["pi": .double(.pi), "nan": .double(.nan), "minus zero": .double(-0.0), "infinity": .double(-.infinity)],
        ["yes": .bool(true), "no": .bool(false)],
        ["at": .date(Date(timeIntervalSinceReferenceDate: 786_000_000.25)), "epoch": .date(Date(timeIntervalSince1970: 0))],
        ["": .string("")],
        ["ünïcödé": .string("日本語 🚀 e\u{301}"), "ascii": .string("plain")],
        // Lengths of 127, 128 and 20 000 bytes: varints of one, two and three bytes, and a value
        // larger than the writer's first storage.
        [String(repeating: "k", count: 127): .string(String(repeating: "v", count: 128)),
         "long": .string(String(repeating: "é", count: 10_000))],
        // Mixed types, enough of them that the writer grows several times.
        Dictionary(uniqueKeysWithValues: (0..<1_000).map { index -> (String, FieldValue) in
            switch index % 5 {
            case 0: ("field-\(index)", .string(String(repeating: "x", count: index)))
            case 1: ("field-\(index)", .int(Int64(index) * -7_919))
            case 2: ("field-\(index)", .double(Double(index) / 3))
            case 3: ("field-\(index)", .bool(index % 2 == 0))
            default: ("field-\(index)", .date(Date(timeIntervalSinceReferenceDate: Double(index))))
            }
        }),
    ]

    @Test func fieldsAreWrittenAsTheCodecWritesThem() {
        for fields in Self.samples {
            var writer = FieldWriter(capacity: 0)
            writer.fields(fields)
            #expect(writer.bytes == Self.codec(fields), "\(fields.count) fields")
        }
    }

    @Test func eachPieceIsWrittenAsTheCodecWritesIt() {
        var writer = FieldWriter()
        var expected: [UInt8] = []
        for value: UInt64 in [0, 1, 127, 128, 16_383, 16_384, 1 << 35, .max] {
            writer.varint(value)
            EventFieldCoding.appendVarint(value, to: &expected)
            writer.fixed(value)
            EventFieldCoding.appendFixed(value, to: &expected)
            writer.byte(UInt8(truncatingIfNeeded: value))
            expected.append(UInt8(truncatingIfNeeded: value))
        }
        for text in ["", "a", "日本語", String(repeating: "z", count: 300)] {
            writer.string(text)
            EventFieldCoding.appendString(text, to: &expected)
        }
        #expect(writer.bytes == expected)
    }

    /// A writer reused for the next event holds that event alone, even a shorter one.
    @Test func aReusedWriterHoldsOnlyWhatWasWrittenSince() {
        var writer = FieldWriter()
        for fields in Self.samples.reversed() {
            writer.removeAll()
            writer.fields(fields)
            #expect(writer.bytes == Self.codec(fields))
        }
    }

    /// The whole payload: the header the array functions would write, then the fields.
    @Test func thePayloadIsTheCodecsByteForByte() {
        for (index, fields) in Self.samples.enumerated() {
            let event = Event(name: "app.sample", source: index % 2 == 0 ? "tester" : "sö\u{200B}urce", fields: fields,
                              wallTime: Date(timeIntervalSinceReferenceDate: 786_000_000.5 + Double(index)))
            var expected: [UInt8] = [WireFormat.version]
            EventFieldCoding.appendFixed(42, to: &expected)
            EventFieldCoding.appendFixed(event.sequence, to: &expected)
            EventFieldCoding.appendFixed(UInt64(index), to: &expected)  // previous
            EventFieldCoding.appendFixed(UInt64(index) + 5, to: &expected)  // number
            EventFieldCoding.appendFixed(event.wallTime.timeIntervalSinceReferenceDate.bitPattern, to: &expected)
            EventFieldCoding.appendString(event.source, to: &expected)
            EventFieldCoding.append(event.fields, to: &expected)
            var writer = FieldWriter()
            WireFormat.encode(event, instance: 42, previous: UInt64(index), number: UInt64(index) + 5, into: &writer)
            #expect(writer.bytes == expected, "sample \(index)")
        }
    }

    /// A host of the previous version sends payloads without the predecessor: read with none (0),
    /// so a fleet can be upgraded host by host; a version this host does not know is refused.
    @Test func aVersionOnePayloadIsReadWithoutAPredecessor() throws {
        let event = Event(name: "app.sample", source: "tester", fields: ["n": .int(5)])
        var bytes: [UInt8] = [1]
        EventFieldCoding.appendFixed(42, to: &bytes)
        EventFieldCoding.appendFixed(17, to: &bytes)
        EventFieldCoding.appendFixed(event.wallTime.timeIntervalSinceReferenceDate.bitPattern, to: &bytes)
        EventFieldCoding.appendString(event.source, to: &bytes)
        EventFieldCoding.append(event.fields, to: &bytes)
        var header = WireFormat.Header(instance: 0, sequence: 0)
        let decoded = try bytes.withUnsafeBytes { try WireFormat.decode($0, name: "app.sample", host: "alpha", header: &header) }
        #expect(header == WireFormat.Header(instance: 42, sequence: 17, previous: 0))
        #expect(decoded["n"] == .int(5) && decoded.source == "tester")
        bytes[0] = WireFormat.version + 1
        #expect(throws: WireFormat.DecodeError.self) {
            try bytes.withUnsafeBytes { try WireFormat.decode($0, name: "app.sample", host: "alpha", header: &header) }
        }
    }

    /// Written, then read back twice on one subject (key by key, then through the learned
    /// shape): the fields come back bit for bit.
    @Test func whatIsWrittenDecodesToTheSameFields() throws {
        for fields in Self.samples {
            let event = Event(name: "app.sample", source: "tester", fields: fields)
            var writer = FieldWriter()
            WireFormat.encode(event, instance: 3, into: &writer)
            let shapes = WireFormat.ShapeCache()
            for _ in 0..<2 {
                let decoded = try writer.withUnsafeBytes { try WireFormat.decodeEvent($0, name: "app.sample", host: "alpha", shapes: shapes) }
                var without = decoded.fields
                for key in [EventOrigin.hostField, EventOrigin.sequenceField, EventOrigin.instanceField] { without[key] = nil }
                #expect(without.count == fields.count)
                for (key, value) in fields {
                    guard case .double(let sent) = value else {
                        #expect(without[key] == value, "\(key)")
                        continue
                    }
                    #expect(without[key]?.doubleValue?.bitPattern == sent.bitPattern, "\(key)")  // NaN too
                }
            }
        }
    }
}
