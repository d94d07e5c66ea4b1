@_spi(EventBusHost) import EventBusKit
import Foundation
import ModuleIsolation
import Testing

/// The worker socket's event decoder treats a field count as a claim, as the bridge's does:
/// nothing is reserved for fields that are not there.
@Suite struct WorkerFrameBoundsTests {
    /// An event as ``EventCodec`` writes it, whose count says `claimed`, with `fields` after it.
    static func event(claimed: UInt32, _ fields: [(String, Bool)]) -> [UInt8] {
        var bytes: [UInt8] = []
        func u64(_ value: UInt64) { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
        func u32(_ value: UInt32) { withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) } }
        func string(_ text: String) { u32(UInt32(text.utf8.count)); bytes.append(contentsOf: text.utf8) }
        u64(1)
        u64(2)
        u64((1_700_000_000.0 as Double).bitPattern)
        string("app.wide")
        string("module")
        u32(claimed)
        for (key, flag) in fields {
            string(key)
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

    @Test func theFieldsDictionaryHasRoomForWhatWasReadNotWhatWasClaimed() throws {
        let repeats = 100_000
        let event = try Self.decode(Self.event(claimed: UInt32(repeats), Array(repeating: ("a", true), count: repeats)))
        #expect(event.fields.count == 1)
        #expect(event.fields.capacity < 1_000, "room for \(event.fields.capacity) fields")
    }
}
