import EventFieldCoding
import Testing

/// ``FieldReader/string()`` takes ASCII without validating it and validates everything else:
/// the fast path must not let through a byte that is not UTF-8 at any place in a string of any
/// length (it reads eight bytes at a time, then the rest one by one).
@Suite struct FieldReaderTextTests {
    static func read(_ utf8: [UInt8]) -> Result<String?, FieldDecodingError> {
        var bytes: [UInt8] = []
        EventFieldCoding.appendVarint(UInt64(utf8.count), to: &bytes)
        bytes += utf8
        return bytes.withUnsafeBytes { raw in
            var reader = FieldReader(raw)
            return Result { () throws(FieldDecodingError) -> String? in try reader.string() }
        }
    }

    @Test func asciiOfEveryLengthComesBackAsItWas() throws {
        for length in 0...40 {
            let text = String((0..<length).map { Character(Unicode.Scalar(UInt8(0x20 + $0 % 0x5F))) })
            #expect(try Self.read(Array(text.utf8)).get() == text)
        }
    }

    @Test func utf8BeyondASCIIComesBackAsItWas() throws {
        for text in ["é", "déploiement terminé", "12345678é", "1234567é", "ascii then 日本語", "🚀 launch"] {
            #expect(try Self.read(Array(text.utf8)).get() == text)
        }
    }

    @Test func aByteThatIsNotUTF8IsRefusedWhereverItIs() {
        for length in 1...24 {
            for position in 0..<length {
                for bad: UInt8 in [0xFF, 0x80, 0xC3] {  // never valid; a lone continuation; a lead byte cut short
                    var utf8 = Array(repeating: UInt8(ascii: "a"), count: length)
                    utf8[position] = bad
                    guard case .failure = Self.read(utf8) else {
                        Issue.record("\(length) bytes with 0x\(String(bad, radix: 16)) at \(position) were taken as text")
                        return
                    }
                }
            }
        }
    }

    @Test func aStringCutShortIsNil() throws {
        let bytes: [UInt8] = [5, UInt8(ascii: "a"), UInt8(ascii: "b")]
        let text = try bytes.withUnsafeBytes { raw in
            var reader = FieldReader(raw)
            return try reader.string()
        }
        #expect(text == nil)
    }
}
