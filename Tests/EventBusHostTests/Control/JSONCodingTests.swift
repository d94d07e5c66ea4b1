import ControlProtocol
import Testing

/// `Codable` to and from a ``JSON`` tree (`JSON(encoding:)`, `JSON.decode(_:)`), the coder the
/// cold-path answers go through: each value kind as JSON has it, nested containers, optionals
/// left out, integers kept exact, and errors that name the member's path.
@Suite struct JSONCodingTests {
    struct Sample: Codable, Equatable {
        enum Colour: String, Codable { case red, blue }
        var text: String
        var flag: Bool
        var whole: Double
        var fraction: Float
        var small: Int8
        var unsigned: UInt64
        var colour: Colour
        var maybe: Int64?
        var list: [[Int]]
        var table: [String: [Bool]]
        var raw: JSON
        var nested: [Sample]
    }

    static let sample = Sample(
        text: "é\"", flag: true, whole: 2, fraction: 0.5, small: -8, unsigned: 9, colour: .blue, maybe: nil, list: [[1], []],
        table: ["a": [true, false]], raw: ["n": .int(1), "d": .double(1), "l": [.null, "x"]],
        nested: [Sample(text: "", flag: false, whole: 0.25, fraction: 0, small: 0, unsigned: 0, colour: .red, maybe: 5, list: [],
                        table: [:], raw: .null, nested: [])])

    @Test func aValueEncodesToTheTreeItsKindsMakeAndReadsBack() throws {
        let json = try JSON(encoding: Self.sample)
        #expect(json["whole"] == .double(2), "a Double stays a double, whole or not")
        #expect(json["small"] == .int(-8) && json["unsigned"] == .int(9))
        #expect(json["colour"] == "blue")
        #expect(json["maybe"] == nil, "nil is left out")
        #expect(json["nested"]?.arrayValue?.first?["maybe"] == .int(5))
        #expect(json["list"] == [[.int(1)], []] && json["table"] == ["a": [.bool(true), .bool(false)]])
        #expect(json["raw"] == ["n": .int(1), "d": .double(1), "l": [.null, "x"]], "a JSON member is carried as it is")
        #expect(try json.decode(Sample.self) == Self.sample)
    }

    @Test func integersAreKeptExactOrRefused() throws {
        #expect(throws: EncodingError.self) { try JSON(encoding: [UInt64.max]) }
        #expect(try JSON.int(300).decode(Int16.self) == 300)
        #expect(try JSON.int(2).decode(Double.self) == 2, "a double may be written as an integer")
        #expect(throws: DecodingError.self) { try JSON.int(300).decode(Int8.self) }
        #expect(throws: DecodingError.self) { try JSON.double(1).decode(Int.self) }
    }

    @Test func errorsNameTheMembersPath() throws {
        var json = try JSON(encoding: Self.sample)
        guard case .object(var members) = json else { return }
        members["nested"] = [["text": .int(1)]]
        json = .object(members)
        do {
            _ = try json.decode(Sample.self)
            Issue.record("decoded")
        } catch {
            #expect(error.reading("a sample") == #"a sample's "nested[0].text": expected a string, found an integer"#)
        }
        members.removeValue(forKey: "flag")
        do {
            _ = try JSON.object(members).decode(Sample.self)
            Issue.record("decoded")
        } catch {
            #expect(error.reading("a sample") == #"a sample needs "flag""#)
        }
    }
}
