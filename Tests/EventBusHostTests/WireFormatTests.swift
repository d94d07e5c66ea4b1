@_spi(EventBusHost) import EventBusKit
import EventBusHost
import ControlProtocol
import Foundation
import ModuleIsolation
import Testing

/// The worker socket's format and the restart policy, without processes.
@Suite struct WireFormatTests {
    @Test func eventsSurviveTheCodecWithTheirFieldTypesAndSequence() throws {
        let event = Event(name: "user.deploy.done", source: "ci", fields: [
            "env": "prod", "replicas": 3, "ratio": 0.5, "canary": false,
            "at": .date(Date(timeIntervalSince1970: 1_700_000_000.25)), "empty": "", "utf8": "grüße ✓",
        ], wallTime: Date(timeIntervalSince1970: 1_700_000_001.5), monotonicNanoseconds: 123_456_789).withSequence(42)
        var frames = FrameBuffer()
        frames.appendEvent(event, type: .events, subscription: 7)
        frames.appendEvent(event.withSequence(43), type: .events, subscription: 8)
        frames.append(.cancel, json: ["id": .int(7)])
        frames.appendEvent(event, type: .events, subscription: 9)
        var bytes: [UInt8] = []
        frames.take(into: &bytes)

        // Written through a real socketpair and cut into frames again.
        var pair: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &pair) == 0)
        defer { close(pair[0]); close(pair[1]) }
        #expect(bytes.withUnsafeBytes { write(pair[0], $0.baseAddress, $0.count) } == bytes.count)
        let reader = FrameReader()
        var got: [(FrameType, [UInt8])] = []
        while got.count < 3 {
            switch reader.next() {
            case .frame(let type, let payload): got.append((type, Array(payload)))
            case .needMore:
                let filled = reader.fill(from: pair[1])
                #expect(filled)
            case .malformed(let reason): Issue.record("malformed: \(reason)"); return
            }
        }
        // Two events batched into one frame, the cancel, then a new batch.
        #expect(got.map(\.0) == [.events, .cancel, .events])
        let decoded = try got[0].1.withUnsafeBytes { raw in
            var decoder = WireDecoder(raw)
            #expect(try decoder.integer(UInt32.self) == 2)
            let first = (try decoder.integer(UInt64.self), try decoder.event())
            let second = (try decoder.integer(UInt64.self), try decoder.event())
            #expect(decoder.isAtEnd)
            return [first, second]
        }
        #expect(decoded.map(\.0) == [7, 8])
        let copy = decoded[0].1
        #expect(copy.name == event.name && copy.source == event.source)
        #expect(copy.fields == event.fields)
        #expect(copy.sequence == 42 && decoded[1].1.sequence == 43)
        #expect(copy.wallTime == event.wallTime && copy.monotonicNanoseconds == event.monotonicNanoseconds)
    }

    @Test func aTruncatedFrameIsAnErrorNotACrash() throws {
        var bytes: [UInt8] = []
        EventCodec.encode(Event(name: "a.b", fields: ["k": "value"]), into: &bytes)
        for cut in 0..<bytes.count {
            let prefix = Array(bytes[0..<cut])
            #expect(throws: WireError.self) {
                try prefix.withUnsafeBytes { raw in
                    var decoder = WireDecoder(raw)
                    _ = try decoder.event()
                }
            }
        }
    }

    @Test func sourceOptionsRebuiltOnTheHostNameTheSameSharedSource() throws {
        let bus = Bus()
        let schedule = try TimerSchedule.every(.milliseconds(250), tolerance: .milliseconds(5), missedRuns: .skip)
        let request = SourceRequest(id: "timer:\(schedule)", options: schedule) { preconditionFailure() }
        let spec = try #require(SourceSpec.encode(request))
        let ticks = try SourceSpec.publisher(on: bus, patterns: [EventPattern("timer.tick")], spec: spec).sink { _ in }
        #expect(bus.statistics.sources["timer:\(schedule)"] == 1)
        ticks.cancel()
        let named = schedule.named("heartbeat")
        let namedSpec = try #require(SourceSpec.encode(SourceRequest(id: "", options: named) { preconditionFailure() }))
        let namedTicks = try SourceSpec.publisher(on: bus, patterns: [EventPattern("timer.tick")], spec: namedSpec).sink { _ in }
        #expect(bus.statistics.sources["timer:\(named)"] == 1, "\(bus.statistics.sources)")
        namedTicks.cancel()

        let calendar = try TimerSchedule.calendar("Mon..Fri *-*-* 09:00", timeZone: TimeZone(identifier: "Europe/Berlin")!)
        let calendarSpec = try #require(SourceSpec.encode(SourceRequest(id: "", options: calendar) { preconditionFailure() }))
        let calendarTicks = try SourceSpec.publisher(on: bus, patterns: [EventPattern("timer.tick")], spec: calendarSpec).sink { _ in }
        #expect(bus.statistics.sources["timer:\(calendar)"] == 1, "\(bus.statistics.sources)")
        calendarTicks.cancel()

        let watch = JournalWatch(match: (.unit("a.service") || .unit("b.service")) && .priority(atMost: .warning),
                                 location: .directory("/var/log/journal"), start: .head, consumer: "c1",
                                 fields: .standard(plus: ["_HOSTNAME"]))
        let journalSpec = try #require(SourceSpec.encode(SourceRequest(id: "", options: watch) { preconditionFailure() }))
        #expect(journalSpec["kind"]?.stringValue == "journal")
        // Without a journal driver the host says so; the options themselves were rebuilt first.
        #expect(throws: EventBusError.self) {
            _ = try SourceSpec.publisher(on: bus, patterns: [EventPattern("journal.>")], spec: journalSpec)
        }
    }

    @Test func restartsBackOffAndStopAtTheStartLimit() {
        var settings = WorkerSettings()
        settings.restartDelay = .milliseconds(100)
        settings.startLimitBurst = 3
        settings.startLimitInterval = .seconds(10)
        var policy = RestartPolicy(settings: settings)
        let start = ContinuousClock.now
        #expect(policy.afterCrash(at: start) == .restart(after: .milliseconds(100)))
        #expect(policy.afterCrash(at: start + .seconds(1)) == .restart(after: .milliseconds(200)))
        #expect(policy.afterCrash(at: start + .seconds(2)) == .restart(after: .milliseconds(400)))
        #expect(policy.afterCrash(at: start + .seconds(3)) == .giveUp(restarts: 3, within: .seconds(10)))
        // Once the first two restarts fall out of the interval, restarts are allowed again (one
        // recent left, so the delay is doubled once).
        #expect(policy.afterCrash(at: start + .seconds(11.5)) == .restart(after: .milliseconds(200)))
    }
}
