@_spi(EventBusHost) import EventBusKit
import EventFieldCoding
import Foundation
@testable import NATSBridge
import Testing

/// A payload's field count is a claim: the decoder must not reserve memory for it before the
/// fields are there. (1 500 one-field payloads of 1 MiB, each claiming a million fields, took
/// a receiver from 37 to 212 MB resident and 33 GB of address space.)
@Suite struct WireFormatBoundsTests {
    /// A payload whose header claims `claimed` fields, followed by `fields` as they are.
    static func payload(claimed: UInt64, _ fields: [(String, String)]) -> [UInt8] {
        var bytes: [UInt8] = [WireFormat.version]
        func fixed(_ value: UInt64) { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
        func varint(_ value: UInt64) {
            var rest = value
            while rest >= 0x80 { bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80); rest >>= 7 }
            bytes.append(UInt8(rest))
        }
        func string(_ text: String) { varint(UInt64(text.utf8.count)); bytes.append(contentsOf: text.utf8) }
        fixed(7)
        fixed(1)
        fixed(0)  // previous
        fixed(0)  // number
        fixed((786_000_000.5 as Double).bitPattern)
        string("tester")
        varint(claimed)
        for (key, value) in fields {
            string(key)
            bytes.append(1)
            string(value)
        }
        return bytes
    }

    static func decode(_ bytes: [UInt8]) -> Result<Event, WireFormat.DecodeError> {
        bytes.withUnsafeBytes { raw in
            Result { () throws(WireFormat.DecodeError) -> Event in try WireFormat.decodeEvent(raw, name: "app.wide", host: "alpha") }
        }
    }

    /// Version 1 of the payload is what other hosts read: the encoder writes exactly the layout
    /// this test spells out by hand (a one-field event: each byte of it).
    @Test func theEncoderWritesVersionOneByteForByte() {
        let event = Event(name: "app.wide", source: "tester", fields: ["k": "v"],
                          wallTime: Date(timeIntervalSinceReferenceDate: 786_000_000.5)).withSequence(1)
        var encoded = FieldWriter()
        WireFormat.encode(event, instance: 7, into: &encoded)
        #expect(encoded.bytes == Self.payload(claimed: 1, [("k", "v")]))
    }

    @Test func aCountThePayloadCannotHoldIsRefusedBeforeAnythingIsReserved() {
        // 2^31 fields claimed, one held; and a megabyte payload claiming a million, one held.
        for bytes in [Self.payload(claimed: 1 << 31, [("a", "b")]),
                      Self.payload(claimed: 1_000_000, [("a", String(repeating: "x", count: 1 << 20))])] {
            guard case .failure(let error) = Self.decode(bytes) else {
                Issue.record("a payload claiming more fields than it holds was decoded")
                continue
            }
            #expect(error.description.contains("fields"), "\(error)")
        }
    }

    /// A count the bytes could hold, with the same key over and over (the last wins, as
    /// ever): the event holds one field, and its dictionary must not keep room for 100 000 —
    /// an imported event lives on in the replay buffer and in every client's.
    @Test func theFieldsDictionaryHasRoomForWhatWasReadNotWhatWasClaimed() throws {
        let repeats = 100_000
        let bytes = Self.payload(claimed: UInt64(repeats), Array(repeating: ("a", "b"), count: repeats))
        let event = try Self.decode(bytes).get()
        #expect(event.fields.count == 4)  // "a" and the three origin fields
        #expect(event.fields.capacity < 1_000, "room for \(event.fields.capacity) fields")
    }
}
