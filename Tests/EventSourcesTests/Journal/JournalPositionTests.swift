import EventBusKit
import EventSources
import Foundation
import Testing

@Suite("Journal: consumer positions, gaps and status", .serialized)
struct JournalPositionTests {
    @Test("a consumer resumes exactly after its last acknowledged entry: the entry at the cursor is not delivered again")
    func resumeAfterAcknowledgement() async throws {
        let journald = try await PrivateJournald.start()
        let writer = JournalWriter(socket: journald.socketPath)
        for index in 0..<10 { writer.send("p\(index)", identifier: "position") }
        let state = try TemporaryDirectory("eventbus-journal-test")
        let bus = Bus()
        JournalDriver.register(on: bus, stateDirectory: state.path)
        let watch = JournalWatch(match: .identifier("position"), location: .directory(journald.logDirectory),
                                 start: .head, consumer: "reader")

        let first = JournalCollected<[String]>([])
        let subscription = try bus.journal(watch).sink { event in
            guard let entry = event.journalEntry else { return }
            first.update { $0.append(entry.message) }
            if entry.message == "p3" { try! bus.acknowledge(entry) }
        }
        #expect(await eventually { first.value.count == 10 })
        subscription.cancel()
        let persisted = try String(contentsOfFile: state.path + "/reader.cursor", encoding: .utf8)
        #expect(persisted.hasPrefix("s="))

        for index in 10..<12 { writer.send("p\(index)", identifier: "position") }
        let second = JournalCollected<[Event]>([])
        let again = try bus.journal(watch).sink { event in second.update { $0.append(event) } }
        #expect(await eventually { second.value.compactMap(\.journalEntry).count == 8 })
        #expect(second.value.compactMap(\.journalEntry).map(\.message) == (4..<12).map { "p\($0)" })
        #expect(second.value.allSatisfy { $0.journalGap == nil })
        again.cancel()
    }

    @Test("acknowledging is refused without a consumer name, and after the watch stopped")
    func acknowledgementRefused() async throws {
        let folder = try TemporaryDirectory("eventbus-journal-test")
        try journalWriteFile(folder.path + "/a.journal", messages: ["one"], identifier: "ack")
        let recorder = try JournalRecorder()
        try recorder.follow(JournalWatch(match: .identifier("ack"), location: .directory(folder.path), start: .head))
        #expect(await eventually { recorder.entries.count == 1 })
        let entry = try #require(recorder.entries.first)
        #expect { try recorder.bus.acknowledge(entry) } throws: { ($0 as? EventBusError)?.code == .acknowledgementFailed }

        let named = try JournalRecorder()
        try named.follow(JournalWatch(match: .identifier("ack"), location: .directory(folder.path), start: .head,
                                      consumer: "named"))
        #expect(await eventually { named.entries.count == 1 })
        let namedEntry = try #require(named.entries.first)
        try named.bus.acknowledge(namedEntry)
        named.cancel()
        #expect { try named.bus.acknowledge(namedEntry) } throws: { ($0 as? EventBusError)?.code == .acknowledgementFailed }
    }

    @Test("one consumer name, two different watches: the second reports `failed` and delivers nothing")
    func consumerInUse() async throws {
        let folder = try TemporaryDirectory("eventbus-journal-test")
        try journalWriteFile(folder.path + "/a.journal", messages: ["one"], identifier: "claim")
        let state = try TemporaryDirectory("eventbus-journal-test")
        let bus = Bus()
        JournalDriver.register(on: bus, stateDirectory: state.path)
        let events = JournalCollected<[Event]>([])
        let firstFollowing = JournalCollected(false)
        let first = try bus.journal(matching: .identifier("claim"), from: .directory(folder.path), start: .head,
                                    consumer: "shared-name").sink { event in
            if event.journalStatus?.state == .following { firstFollowing.update { $0 = true } }
        }
        // The first watch holds the name once it follows (it claims it before opening).
        #expect(await eventually { firstFollowing.value })
        let second = try bus.journal(matching: .all, from: .directory(folder.path), start: .head, consumer: "shared-name")
            .sink { event in events.update { $0.append(event) } }
        #expect(await eventually { events.value.contains { $0.journalStatus?.state == .failed } })
        #expect(events.value.allSatisfy { $0.journalEntry == nil })
        first.cancel()
        second.cancel()
    }

    @Test("a cursor into vacuumed files: a journal.gap, then the oldest entry still there")
    func vacuumedCursor() async throws {
        let journald = try await PrivateJournald.start()
        let writer = JournalWriter(socket: journald.socketPath)
        let state = try TemporaryDirectory("eventbus-journal-test")
        let bus = Bus()
        JournalDriver.register(on: bus, stateDirectory: state.path)
        let watch = JournalWatch(match: .identifier("vacuum"), location: .directory(journald.logDirectory),
                                 start: .head, consumer: "vacuum")
        for index in 0..<10 { writer.send("v\(index)", identifier: "vacuum") }
        let seen = JournalCollected<[String]>([])
        let first = try bus.journal(watch).sink { event in
            guard let entry = event.journalEntry else { return }
            seen.update { $0.append(entry.message) }
            if entry.message == "v4" { try! bus.acknowledge(entry) }
        }
        #expect(await eventually { seen.value.count == 10 })
        first.cancel()

        // Two rotations: v0…v9 and v10…v19 end up in archived files, v20… in the active one.
        for round in 1...2 {
            let files = journald.journalFiles.count
            journald.rotate()
            #expect(await eventually { journald.journalFiles.count > files })
            for index in round * 10..<(round * 10 + 10) { writer.send("v\(index)", identifier: "vacuum") }
        }
        // Keep two files: the oldest archived one, with the acknowledged entry, goes.
        #expect(try journalRun(["/usr/bin/journalctl", "-D", journald.logDirectory, "--vacuum-files=2", "-q"]) == 0)
        #expect(journald.journalFiles.count == 2)

        let events = JournalCollected<[Event]>([])
        let second = try bus.journal(watch).sink { event in events.update { $0.append(event) } }
        #expect(await eventually { events.value.compactMap(\.journalEntry).count == 20 })
        let relevant = events.value.filter { $0.journalStatus == nil }
        let gap = try #require(relevant.first?.journalGap, "the gap comes before any entry")
        let entries = relevant.dropFirst().compactMap(\.journalEntry)
        #expect(entries.map(\.message) == (10..<30).map { "v\($0)" })
        #expect(gap.resumedCursor == entries.first?.cursor)
        #expect(gap.lostCursor == (try String(contentsOfFile: state.path + "/vacuum.cursor", encoding: .utf8))
            .trimmingCharacters(in: .whitespacesAndNewlines))
        // v5…v9 were lost, plus whatever journald logged about itself between them and v10.
        #expect((gap.skippedSequenceNumbers ?? 0) >= 5)
        second.cancel()
    }

    @Test("no journal: a clear `unavailable` status, retries, then follows once the journal appears")
    func noJournal() async throws {
        let parent = try TemporaryDirectory("eventbus-journal-test")
        let missing = parent.path + "/not-yet"
        let recorder = try JournalRecorder(retry: .milliseconds(20))
        try recorder.follow(JournalWatch(match: .identifier("late"), location: .directory(missing), start: .head))
        #expect(await eventually { recorder.statuses.contains { $0.state == .unavailable } })
        let status = try #require(recorder.statuses.first)
        #expect(status.state == .unavailable && status.reason.contains(missing) && status.retryAfterSeconds == 0.02)
        #expect(recorder.statuses.count == 1, "a retry with the same outcome says nothing new")

        try FileManager.default.createDirectory(atPath: missing, withIntermediateDirectories: true)
        try journalWriteFile(missing + "/late.journal", messages: ["arrived"], identifier: "late")
        #expect(await eventually { recorder.messages == ["arrived"] })
        #expect(recorder.statuses.last?.state == .following)
    }

    @Test("the system journal on a machine without journald is `unavailable`, not a crash")
    func systemJournalWithoutJournald() async throws {
        let noDaemon = access("/run/systemd/journal/socket", F_OK) != 0
        let noFiles = ((try? FileManager.default.subpathsOfDirectory(atPath: "/var/log/journal")) ?? [])
            .allSatisfy { !$0.hasSuffix(".journal") }
            && ((try? FileManager.default.subpathsOfDirectory(atPath: "/run/log/journal")) ?? [])
            .allSatisfy { !$0.hasSuffix(".journal") }
        let recorder = try JournalRecorder()
        try recorder.follow(JournalWatch(location: .system))
        #expect(await eventually { !recorder.statuses.isEmpty })
        let status = try #require(recorder.statuses.first)
        if noDaemon && noFiles {
            #expect(status.state == .unavailable)
            #expect(status.reason.contains("no journald"))
        } else {
            #expect(status.state == .following)  // this machine has a journal
        }
    }
}
