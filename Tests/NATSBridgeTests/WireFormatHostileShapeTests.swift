import EventBusKit
import Foundation
@testable import NATSBridge
import Testing

/// Damaged and hostile payloads on a subject whose shape the importer has learned — the path
/// that sets values by index instead of reading key by key — are refused exactly as without
/// it: every truncation, claimed counts the bytes cannot hold, text that is not UTF-8 in a
/// value, a key or the source. Nothing of them is posted, and the next good payload decodes.
@Suite struct WireFormatHostileShapeTests {
    typealias Value = WireFormatShapeTests.Value

    static let fields: [(String, Value)] = [("n", .int(1)), ("env", .string("prod")), ("ok", .bool(true))]

    /// A cache that has learned the shape of `fields`.
    static func learned() throws -> WireFormat.ShapeCache {
        let cache = WireFormat.ShapeCache()
        let bytes = WireFormatShapeTests.payload(sequence: 1, fields)
        _ = try bytes.withUnsafeBytes { try WireFormat.decodeEvent($0, name: "app.shape", host: "alpha", shapes: cache) }
        return cache
    }

    /// The error with the learned shape; the same error without any.
    static func refusal(_ bytes: [UInt8]) throws -> String? {
        let cache = try learned()
        func decode(_ shapes: WireFormat.ShapeCache?) -> String? {
            bytes.withUnsafeBytes { raw in
                do throws(WireFormat.DecodeError) {
                    _ = try WireFormat.decodeEvent(raw, name: "app.shape", host: "alpha", shapes: shapes)
                    return nil
                } catch {
                    return error.description
                }
            }
        }
        let cached = decode(cache)
        #expect(cached == decode(nil))
        // The cache still serves the shape it knew.
        let good = WireFormatShapeTests.payload(sequence: 2, fields)
        let event = try good.withUnsafeBytes { try WireFormat.decodeEvent($0, name: "app.shape", host: "alpha", shapes: cache) }
        #expect(event["env"] == .string("prod") && event.origin?.sequence == 2)
        return cached
    }

    @Test func everyTruncationIsRefused() throws {
        let whole = WireFormatShapeTests.payload(sequence: 5, Self.fields)
        for length in 0..<whole.count {
            #expect(try Self.refusal(Array(whole.prefix(length))) != nil, "\(length) of \(whole.count) bytes decoded")
        }
    }

    @Test func countsTheBytesCannotHoldAreRefused() throws {
        for claimed: UInt64 in [4, 1_000, 1 << 31, 1 << 62] {
            var bytes = WireFormatShapeTests.payload(sequence: 5, Self.fields)
            // The field count is the byte after the header (1 + 5 × 8) and the source ("tester").
            let countOffset = 1 + 40 + 1 + 6
            #expect(bytes[countOffset] == 3)
            var varint: [UInt8] = []
            var rest = claimed
            while rest >= 0x80 { varint.append(UInt8(truncatingIfNeeded: rest) | 0x80); rest >>= 7 }
            varint.append(UInt8(rest))
            bytes.replaceSubrange(countOffset...countOffset, with: varint)
            let refusal = try Self.refusal(bytes)
            #expect(refusal != nil, "a claim of \(claimed) fields decoded")
        }
    }

    @Test func textThatIsNotUTF8IsRefusedWherever() throws {
        let invalid: [UInt8] = [0xC3, 0x28]  // a lead byte followed by no continuation
        // In a value of the learned key.
        var value = WireFormatShapeTests.payload(sequence: 5, [("n", .int(1)), ("env", .string("pr")), ("ok", .bool(true))])
        let at = value.indices.first { value[$0] == UInt8(ascii: "p") && value[$0 + 1] == UInt8(ascii: "r") }!
        value.replaceSubrange(at..<at + 2, with: invalid)
        #expect(try Self.refusal(value)?.contains("UTF-8") == true)
        // In a key of the learned length.
        var key = WireFormatShapeTests.payload(sequence: 5, [("n", .int(1)), ("enx", .string("prod")), ("ok", .bool(true))])
        let keyAt = key.indices.first { key[$0] == UInt8(ascii: "e") && key[$0 + 1] == UInt8(ascii: "n") }!
        key.replaceSubrange(keyAt..<keyAt + 2, with: invalid)
        #expect(try Self.refusal(key)?.contains("UTF-8") == true)
        // In the source.
        var source = WireFormatShapeTests.payload(sequence: 5, Self.fields)
        source.replaceSubrange(42..<44, with: invalid)  // "te" of "tester"
        #expect(try Self.refusal(source)?.contains("UTF-8") == true)
    }
}
