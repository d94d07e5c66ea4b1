import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import ModuleIsolation
import Testing

/// A worker's source request as it crosses to the host (``SourceSpec``): one `Codable` value
/// read back as it was written, and a malformed one refused naming the member.
@Suite struct SourceSpecTests {
    @Test func aSpecReadsBackAsTheOptionsKindAndCodableForm() throws {
        let schedule = try TimerSchedule.every(.milliseconds(250), tolerance: .milliseconds(5), missedRuns: .skip)
        let json = try #require(SourceSpec.encode(SourceRequest(id: "", options: schedule) { preconditionFailure() }))
        let spec: SourceSpec = try json.decode()
        #expect(spec.kind == TimerSchedule.kind)
        #expect(try JSON(encoding: spec) == json)
        #expect(json.objectValue?.keys.sorted() == ["kind", "options"], "the members the host has always read")
    }

    @Test func aMalformedSpecIsRefusedNamingTheMember() {
        let bus = Bus()
        let cases: [(JSON, String)] = [
            (["kind": .int(3), "options": [:]], #"a source spec's "kind": expected a string, found an integer"#),
            (["kind": "timer"], #"a source spec needs "options""#),
            (.array([]), "a source spec: expected an object, found a list"),
        ]
        for (spec, message) in cases {
            #expect {
                _ = try SourceSpec.publisher(on: bus, patterns: [EventPattern("timer.tick")], spec: spec)
            } throws: { error in
                (error as? WireError)?.message == message
            }
        }
    }
}
