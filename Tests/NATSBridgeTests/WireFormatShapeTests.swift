import EventBusKit
import Foundation
@testable import NATSBridge
import Testing

/// The importer's shape cache (``WireFormat/ShapeCache``): payloads decoded with it on one subject
/// must equal payloads decoded key by key, whatever changes from one payload to the next — key
/// order, value types, the key set, duplicates, damage. Payloads are written byte by byte here,
/// so the order of keys is the test's, not a dictionary's.
@Suite struct WireFormatShapeTests {
    enum Value { case string(String), int(Int64), double(Double), bool(Bool), date(Double) }

    static func payload(sequence: UInt64, _ fields: [(String, Value)], source: String = "tester", truncate: Int = 0) -> [UInt8] {
        var bytes: [UInt8] = [WireFormat.version]
        func fixed(_ value: UInt64) { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
        func varint(_ value: UInt64) {
            var rest = value
            while rest >= 0x80 { bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80); rest >>= 7 }
            bytes.append(UInt8(rest))
        }
        func string(_ text: String) { varint(UInt64(text.utf8.count)); bytes.append(contentsOf: text.utf8) }
        fixed(7)  // instance
        fixed(sequence)
        fixed(0)  // previous
        fixed(0)  // number
        fixed((786_000_000.5 as Double).bitPattern)
        string(source)
        varint(UInt64(fields.count))
        for (key, value) in fields {
            string(key)
            switch value {
            case .string(let text): bytes.append(1); string(text)
            case .int(let number): bytes.append(2); fixed(UInt64(bitPattern: number))
            case .double(let number): bytes.append(3); fixed(number.bitPattern)
            case .bool(let flag): bytes.append(4); bytes.append(flag ? 1 : 0)
            case .date(let seconds): bytes.append(5); fixed(seconds.bitPattern)
            }
        }
        return Array(bytes.dropLast(truncate))
    }

    /// Decoded with and without the cache: the same event, or the same error.
    func decodeBoth(_ bytes: [UInt8], cache: WireFormat.ShapeCache) -> Result<Event, WireFormat.DecodeError> {
        func decode(_ shapes: WireFormat.ShapeCache?) -> Result<Event, WireFormat.DecodeError> {
            bytes.withUnsafeBytes { raw in
                Result { () throws(WireFormat.DecodeError) -> Event in
                    try WireFormat.decodeEvent(raw, name: "app.shape", host: "alpha", shapes: shapes)
                }
            }
        }
        let cached = decode(cache), plain = decode(nil)
        switch (cached, plain) {
        case (.success(let a), .success(let b)):
            #expect(a.fields == b.fields && a.source == b.source && a.wallTime == b.wallTime)
        case (.failure(let a), .failure(let b)):
            #expect(a.description == b.description)
        default:
            Issue.record("with the cache \(cached), without \(plain)")
        }
        return cached
    }

    @Test func everyPayloadDecodesAsIfKeyByKey() throws {
        let cache = WireFormat.ShapeCache()
        let payloads: [[UInt8]] = [
            Self.payload(sequence: 1, [("n", .int(1)), ("env", .string("prod")), ("ok", .bool(true))]),
            Self.payload(sequence: 2, [("n", .int(2)), ("env", .string("test")), ("ok", .bool(false))]),  // same shape
            Self.payload(sequence: 3, [("ok", .bool(true)), ("n", .int(3)), ("env", .string("x"))]),  // other order
            Self.payload(sequence: 4, [("n", .double(4.5)), ("env", .date(12.25)), ("ok", .string("yes"))]),  // other types
            Self.payload(sequence: 5, [("n", .int(5)), ("env", .string("a"))]),  // fewer keys
            Self.payload(sequence: 6, [("n", .int(6)), ("env", .string("b")), ("zone", .string("z"))]),  // a key changed
            Self.payload(sequence: 7, [("n", .int(7)), ("n", .int(8)), ("zone", .string("z"))]),  // a duplicate: the last wins
            Self.payload(sequence: 8, [("n", .int(9)), ("env", .string("c")), ("zone", .string("z"))]),
            Self.payload(sequence: 9, [("n", .int(9)), ("env", .string("c")), ("zone", .string("z"))], truncate: 3),
            Self.payload(sequence: 10, [("n", .int(10)), ("env", .string("d")), ("zone", .string("z"))]) + [0],  // trailing byte
            Self.payload(sequence: 11, [(EventOrigin.hostField, .string("forged")), ("n", .int(11))]),  // an origin key sent
            Self.payload(sequence: 12, []),
            Self.payload(sequence: 13, [("n", .int(13)), ("env", .string("e")), ("zone", .string("z"))]),
        ]
        var results: [Result<Event, WireFormat.DecodeError>] = []
        for payload in payloads { results.append(decodeBoth(payload, cache: cache)) }

        let third = try results[2].get()
        #expect(third["n"] == .int(3) && third["ok"] == .bool(true) && third["env"] == .string("x"))
        #expect(try results[3].get()["n"] == .double(4.5))
        #expect(try results[4].get().fields.count == 2 + 3)
        #expect(try results[6].get()["n"] == .int(8))
        for index in [8, 9] {
            guard case .failure = results[index] else { Issue.record("payload \(index) decoded"); continue }
        }
        #expect(try results[10].get().origin?.host == "alpha")
        #expect(try results[12].get().origin?.sequence == 13)
        #expect(try results[12].get()["env"] == .string("e"))
    }
}
