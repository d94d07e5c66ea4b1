@_spi(EventBusHost) import EventBusKit
import EventFieldCoding
import Foundation
import ModuleIsolation
import Testing

/// The worker socket's event decoder treats a field count as a claim, as the bridge's does:
/// nothing is reserved for fields that are not there.
@Suite struct WorkerFrameBoundsTests {
    /// An event as ``EventCodec`` writes it, whose count says `claimed`, with `fields` after it.
    static func event(claimed: UInt64, _ fields: [(String, Bool)]) -> [UInt8] {
        var bytes: [UInt8] = []
        EventFieldCoding.appendFixed(1, to: &bytes)
        EventFieldCoding.appendFixed(2, to: &bytes)
        EventFieldCoding.appendFixed((1_700_000_000.0 as Double).bitPattern, to: &bytes)
        EventFieldCoding.appendString("app.wide", to: &bytes)
        EventFieldCoding.appendString("module", to: &bytes)
        EventFieldCoding.appendVarint(claimed, to: &bytes)
        for (key, flag) in fields {
            EventFieldCoding.appendString(key, to: &bytes)
            bytes.append(4)  // bool
            bytes.append(flag ? 1 : 0)
        }
        return bytes
    }

    static func decode(_ bytes: [UInt8]) throws -> Event {
        try bytes.withUnsafeBytes { raw in
            var decoder = WireDecoder(raw)
            return try decoder.event()
        }
    }

    @Test func aCountTheFrameCannotHoldIsRefused() {
        // 2^31 claimed, one held.
        #expect(throws: WireError.self) { try Self.decode(Self.event(claimed: 1 << 31, [("a", true)])) }
        // As many claimed as there are bytes left, one field held, zeros after it.
        let padded = Self.event(claimed: 60_000, [("a", true)]) + [UInt8](repeating: 0, count: 60_000)
        #expect(throws: WireError.self) { try Self.decode(padded) }
    }

    /// A worker runs a module's code: text that is not UTF-8 is refused, as the bridge refuses
    /// it, instead of being posted with U+FFFD in its place.
    @Test func textThatIsNotUTF8IsRefused() {
        var bytes = Self.event(claimed: 1, [])
        EventFieldCoding.appendVarint(2, to: &bytes)
        bytes += [0xC3, 0x28]
        bytes.append(4)
        bytes.append(1)
        #expect(throws: WireError.self) { try Self.decode(bytes) }
    }

    @Test func theFieldsDictionaryHasRoomForWhatWasReadNotWhatWasClaimed() throws {
        let repeats = 100_000
        let event = try Self.decode(Self.event(claimed: UInt64(repeats), Array(repeating: ("a", true), count: repeats)))
        #expect(event.fields.count == 1)
        #expect(event.fields.capacity < 1_000, "room for \(event.fields.capacity) fields")
    }
}
