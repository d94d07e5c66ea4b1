import EventBusKit
import EventSources
import Foundation
import Testing

@Suite("Journal: following a real journald", .serialized)
struct JournalFollowTests {
    @Test("live follow from the tail: entries written after `following`, in order, with their fields")
    func liveFollow() async throws {
        let journald = try await PrivateJournald.start()
        let writer = JournalWriter(socket: journald.socketPath)
        writer.send("before the watch", identifier: "live")
        // journald takes datagrams asynchronously: make sure it is in the file before the watch
        // opens, so "tail" has something to start after.
        #expect(await eventually { journalctlMessages(journald.logDirectory).contains("before the watch") })
        let recorder = try JournalRecorder()
        try recorder.follow(JournalWatch(match: .identifier("live"), location: .directory(journald.logDirectory)))
        #expect(await eventually { recorder.isFollowing })
        for index in 0..<100 {
            writer.send("live \(index)", identifier: "live", priority: .notice, fields: [("EXTRA_FIELD", "x")])
        }
        writer.send("other", identifier: "someone-else")
        #expect(await eventually { recorder.entries.count >= 100 })
        #expect(recorder.messages == (0..<100).map { "live \($0)" })
        let first = try #require(recorder.entries.first)
        #expect(first.priority == .notice)
        #expect(first.identifier == "live")
        #expect(first.pid == getpid())
        #expect(first.bootID.count == 32)
        #expect(first.cursor.contains("s=") && first.realtimeMicroseconds > 0 && first.monotonicMicroseconds > 0)
        #expect(first.fields.isEmpty, "extra fields only on request")
        #expect(recorder.gaps.isEmpty)
    }

    @Test("extra fields only on request: a list of names, or every field")
    func extraFields() async throws {
        let journald = try await PrivateJournald.start()
        let some = try JournalRecorder()
        try some.follow(JournalWatch(match: .identifier("fields"), location: .directory(journald.logDirectory),
                                     fields: .standard(plus: ["EXTRA_FIELD", "_TRANSPORT"])))
        let all = try JournalRecorder()
        try all.follow(JournalWatch(match: .identifier("fields"), location: .directory(journald.logDirectory),
                                    fields: .everything))
        #expect(await eventually { some.isFollowing && all.isFollowing })
        JournalWriter(socket: journald.socketPath)
            .send("with fields", identifier: "fields", fields: [("EXTRA_FIELD", "x"), ("OTHER_FIELD", "y")])
        #expect(await eventually { some.entries.count == 1 && all.entries.count == 1 })
        #expect(some.entries.first?.fields == ["EXTRA_FIELD": "x", "_TRANSPORT": "journal"])
        let everything = try #require(all.entries.first?.fields)
        #expect(everything["OTHER_FIELD"] == "y" && everything["MESSAGE"] == "with fields")
        #expect(everything["_PID"] == String(getpid()) && everything["_BOOT_ID"] != nil)
    }

    @Test("equal watches share one reader and one inotify instance, closed when the last subscriber leaves")
    func sharing() async throws {
        let journald = try await PrivateJournald.start()
        let bus = Bus()
        let state = try TemporaryDirectory("eventbus-journal-test")
        JournalDriver.register(on: bus, stateDirectory: state.path)
        let watched = journald.logDirectory
        let watch = JournalWatch(match: .identifier("shared"), location: .directory(journald.logDirectory))
        let first = JournalCollected<[String]>([])
        let second = JournalCollected<[String]>([])
        let following = JournalCollected(0)
        let a = try bus.journal(watch).sink { event in
            if let entry = event.journalEntry { first.update { $0.append(entry.message) } }
            if event.journalStatus?.state == .following { following.update { $0 += 1 } }
        }
        #expect(await eventually { following.value == 1 })
        let b = try bus.journal(watch).sink { event in
            if let entry = event.journalEntry { second.update { $0.append(entry.message) } }
        }
        #expect(bus.statistics.sources.count == 1)
        #expect(bus.statistics.sources.values.first == 2)
        // sd_journal_wait took the handle's inotify instance on the first wait.
        #expect(await eventually { inotifyInstances(watching: watched) == 1 })
        let writer = JournalWriter(socket: journald.socketPath)
        for index in 0..<20 { writer.send("s\(index)", identifier: "shared") }
        #expect(await eventually { first.value.count == 20 && second.value.count == 20 })
        #expect(first.value == second.value)
        a.cancel()
        #expect(bus.statistics.sources.values.first == 1)
        b.cancel()
        #expect(bus.statistics.sources.isEmpty)
        // stop() returns after the reader thread closed its handle.
        #expect(inotifyInstances(watching: watched) == 0)
    }

    @Test("rotation (SIGUSR2) while following: every entry once, in order, across the new files")
    func rotationDuringFollow() async throws {
        let journald = try await PrivateJournald.start()
        let recorder = try JournalRecorder()
        try recorder.follow(JournalWatch(match: .identifier("rotate"), location: .directory(journald.logDirectory)))
        #expect(await eventually { recorder.isFollowing })
        let writer = JournalWriter(socket: journald.socketPath)
        var written: [String] = []
        for round in 0..<4 {
            for index in 0..<150 {
                written.append("r\(round)-\(index)")
                writer.send(written.last!, identifier: "rotate")
            }
            let files = journald.journalFiles.count
            journald.rotate()
            // Rotate mid-stream: wait until journald has switched files, then write on.
            #expect(await eventually { journald.journalFiles.count > files })
        }
        #expect(await eventually { recorder.entries.count >= written.count })
        #expect(recorder.messages == written)
        #expect(journald.journalFiles.count >= 5)
        #expect(recorder.gaps.isEmpty)
    }

    @Test("follow from the head and since a time, in journal files written without a daemon")
    func headAndSince() async throws {
        let folder = try TemporaryDirectory("eventbus-journal-test")
        try journalWriteFile(folder.path + "/a.journal", messages: (0..<10).map { "h\($0)" }, identifier: "remote")
        let head = try JournalRecorder()
        try head.follow(JournalWatch(match: .identifier("remote"), location: .directory(folder.path), start: .head))
        #expect(await eventually { head.entries.count == 10 })
        #expect(head.messages == (0..<10).map { "h\($0)" })
        let sixth = try #require(head.entries.dropFirst(5).first)
        let since = try JournalRecorder()
        try since.follow(JournalWatch(match: .identifier("remote"), location: .directory(folder.path),
                                      start: .since(sixth.realtime)))
        #expect(await eventually { since.entries.count == 5 })
        #expect(since.messages == (5..<10).map { "h\($0)" })
        let after = try JournalRecorder()
        try after.follow(JournalWatch(match: .identifier("remote"), location: .directory(folder.path),
                                      start: .afterCursor(sixth.cursor)))
        #expect(await eventually { after.entries.count == 4 })
        #expect(after.messages == (6..<10).map { "h\($0)" })
        #expect(head.gaps.isEmpty && since.gaps.isEmpty && after.gaps.isEmpty)
    }
}

/// inotify instances of this process watching `directory` (sd_journal_wait takes one per handle,
/// watching the journal directory). Counted by inode, because other tests run in parallel.
func inotifyInstances(watching directory: String) -> Int {
    var info = stat()
    guard stat(directory, &info) == 0 else { return 0 }
    let inode = "ino:" + String(info.st_ino, radix: 16) + " "
    let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
    return fds.filter { fd in
        guard (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + fd)) == "anon_inode:inotify",
              let fdinfo = try? String(contentsOfFile: "/proc/self/fdinfo/" + fd, encoding: .utf8)
        else { return false }
        return fdinfo.contains(inode)
    }.count
}

/// The entries `journalctl -D` reads from `directory`, one line each (`-o cat`: the messages):
/// an independent view of what journald wrote.
func journalctlMessages(_ directory: String, format: String = "cat") -> [String] {
    guard let ends = try? journalPipe(),
          let pid = try? journalSpawn(["/usr/bin/journalctl", "-D", directory, "-o", format, "-q"], stdout: ends[1])
    else { return [] }
    close(ends[1])
    let output = FileHandle(fileDescriptor: ends[0], closeOnDealloc: true).readDataToEndOfFile()
    journalWait(pid)
    return String(decoding: output, as: UTF8.self).split(separator: "\n").map(String.init)
}
