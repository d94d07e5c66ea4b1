@testable import NATSBridge
import Testing

/// A durable export's JetStream message id is `<host>:<instance>:<sequence>`: the server drops a
/// re-publish by it, so it must name one event for good, written the same at every attempt.
@Suite struct MessageIDTests {
    @Test func theIdIsHostInstanceAndSequenceInDecimal() {
        var id = Exporter.MessageID(host: "web-1", instance: 1_764_198_000_123_456_789)
        for sequence: UInt64 in [0, 1, 9, 10, 99, 100, 12_345, 1 << 32, .max] {
            let text = id.withCString(sequence) { String(cString: $0) }
            #expect(text == "web-1:1764198000123456789:\(sequence)")
        }
        // A shorter sequence after a longer one leaves none of the longer's digits behind.
        #expect(id.withCString(.max) { String(cString: $0) }.hasSuffix(":18446744073709551615"))
        #expect(id.withCString(7) { String(cString: $0) } == "web-1:1764198000123456789:7")
    }
}
