@testable import EventBusHost
import Foundation
import Logging
import Testing

/// Logging to journald: the native protocol's encoding, field names, a writer that never blocks
/// its caller, and the real eventbusd writing to a real private journald.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct JournaldLoggingTests {
    @Test func encodesPlainValuesAsAssignmentsAndMultiLineValuesWithTheirLength() {
        let bytes = JournaldWriter.encode([("MESSAGE", "two\nlines"), ("PRIORITY", "6")])
        var expected = Array("MESSAGE\n".utf8)
        expected += [9, 0, 0, 0, 0, 0, 0, 0]
        expected += Array("two\nlines\nPRIORITY=6\n".utf8)
        #expect(bytes == expected)
    }

    @Test func metadataKeysBecomeValidJournalFieldNames() {
        #expect(JournaldLogHandler.fieldName(forMetadataKey: "module") == "EVENTBUS_MODULE")
        #expect(JournaldLogHandler.fieldName(forMetadataKey: "request-id") == "REQUEST_ID")
        #expect(JournaldLogHandler.fieldName(forMetadataKey: "config.path") == "CONFIG_PATH")
        // Names journald keeps for itself, or would reject, or this handler sets.
        #expect(JournaldLogHandler.fieldName(forMetadataKey: "_pid") == "EVENTBUS__PID")
        #expect(JournaldLogHandler.fieldName(forMetadataKey: "2fa") == "EVENTBUS_2FA")
        #expect(JournaldLogHandler.fieldName(forMetadataKey: "message") == "EVENTBUS_MESSAGE")
        #expect(JournaldLogHandler.fieldName(forMetadataKey: "priority") == "EVENTBUS_PRIORITY")
        #expect(JournaldLogHandler.fieldName(forMetadataKey: "--") == nil)
        #expect(JournaldLogHandler.fieldName(forMetadataKey: String(repeating: "k", count: 100))?.count == 64)
    }

    @Test func levelsMapToSyslogPriorities() {
        let levels: [Logger.Level] = [.trace, .debug, .info, .notice, .warning, .error, .critical]
        #expect(levels.map(JournaldLogHandler.priority(of:)) == [7, 7, 6, 5, 4, 3, 2])
    }

    @Test func journalStreamMustBeStandardErrorsOwn() {
        var info = stat()
        fstat(2, &info)
        #expect(HostLogging.standardErrorIsJournal(journalStream: "\(info.st_dev):\(info.st_ino)"))
        #expect(!HostLogging.standardErrorIsJournal(journalStream: "\(info.st_dev):\(info.st_ino + 1)"))
        #expect(!HostLogging.standardErrorIsJournal(journalStream: "garbage"))
        #expect(!HostLogging.standardErrorIsJournal(journalStream: nil))
    }

    /// journald not keeping up: the receiver reads nothing until every write has returned. The
    /// writes still return (the backlog and the writer thread take over), what fits is
    /// delivered in order, and each run of dropped entries is announced, with its exact count,
    /// right where the entries are missing. (How many runs there are depends on when the writer
    /// thread first took the backlog: that is scheduling, so the test does not fix it.)
    @Test func aStalledJournalNeverBlocksTheCallerAndLossIsCounted() async throws {
        let directory = try TemporaryDirectory()
        let receiver = try DatagramReceiver(path: directory.path + "/journal.sock", reading: false)
        let writer = try JournaldWriter(socketPath: receiver.path, identifier: "test", backlogLimit: 50)
        let total = 500
        for index in 0..<total {
            writer.write(fields: [("MESSAGE", "entry \(index)"), ("PRIORITY", "6")], priority: 6, message: "entry \(index)")
        }
        receiver.startReading()
        #expect(writer.flush(timeout: patience))
        let dropped = /journald did not keep up: (\d+) log message\(s\) dropped \(backlog of 50 full\)/
        // After the flush every datagram was sent; the reader may still be receiving the last.
        let isComplete = {
            let messages = receiver.messages.map { notifyAssignments($0)["MESSAGE"] ?? "" }
            let entries = messages.filter { $0.hasPrefix("entry ") }.count
            let announced = messages.compactMap { try? dropped.wholeMatch(in: $0).map { Int($0.1)! } }.reduce(0, +)
            return entries + announced == total
        }
        #expect(await eventually(isComplete), "\(receiver.messages.count) received")

        // Walk the stream: entries count up; a notice stands exactly where entries are missing
        // and says how many.
        var next = 0
        var notices = 0
        for message in receiver.messages.map({ notifyAssignments($0)["MESSAGE"] ?? "" }) {
            if let match = try? dropped.wholeMatch(in: message) {
                notices += 1
                next += Int(match.1)!
            } else {
                #expect(message == "entry \(next)")
                next += 1
            }
        }
        #expect(next == total)
        #expect(notices >= 1)
    }

    /// An entry larger than one datagram goes as a sealed memory file; the real journald takes
    /// it whole.
    @Test func anEntryTooLargeForADatagramReachesJournaldAsAMemoryFile() async throws {
        let journald = try await TestJournald()
        let writer = try JournaldWriter(socketPath: journald.socketPath, identifier: "eventbus-large-test")
        // 17 MiB: over the largest datagram the socket can send (the kernel doubles the 8 MiB
        // send buffer the writer asks for, and refuses a datagram larger than that with
        // EMSGSIZE; smaller ones of several MiB may already fail with ENOBUFS).
        let large = String(repeating: "0123456789abcdef", count: 17 << 16)
        writer.write(fields: [("MESSAGE", large), ("SYSLOG_IDENTIFIER", "eventbus-large-test"), ("TEST_SIZE", "\(large.utf8.count)")],
                     priority: 6, message: "large")
        #expect(writer.flush(timeout: patience))
        var entry: [String: Any]?
        _ = await eventually {
            entry = try? journald.entries().first { $0["SYSLOG_IDENTIFIER"] as? String == "eventbus-large-test" }
            return entry != nil
        }
        let found = try #require(entry)
        #expect((found["MESSAGE"] as? String)?.utf8.count == large.utf8.count)
        #expect(found["MESSAGE"] as? String == large)
        await journald.stop()
    }

    /// The real eventbusd under a real private journald: its standard error is a file whose
    /// `device:inode` the test puts in `JOURNAL_STREAM` (what systemd does for a service whose
    /// output goes to the journal), and `EVENTBUS_JOURNAL_SOCKET` points at the private
    /// journald. Entries read back with `journalctl -o json` carry the structured fields.
    @Test func eventbusdLogsStructuredEntriesToJournald() async throws {
        let journald = try await TestJournald()
        let directory = try TemporaryDirectory()
        let configPath = try directory.writeDaemonConfig("""
            sources:
              timers:
                - {name: fast, every: 50ms}
            modules:
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
                config: {pattern: timer.tick}
              broken:
                path: \(directory.path)/missing.so
            """)
        let stderrPath = try directory.write("eventbusd.stderr", "")
        let daemon = try SpawnedProcess(
            [BuildProducts.eventbusd, "--config", configPath],
            environment: environment(with: [
                "JOURNAL_STREAM": journalStreamValue(of: stderrPath),
                JournaldWriter.socketPathVariable: journald.socketPath,
            ]),
            outputPath: stderrPath)

        func entries() -> [[String: Any]] {
            ((try? journald.entries()) ?? []).filter { $0["SYSLOG_IDENTIFIER"] as? String == "eventbusd" }
        }
        func message(_ entry: [String: Any]) -> String { entry["MESSAGE"] as? String ?? "" }
        #expect(await eventually { entries().contains { message($0) == "first event timer.tick" } }, "\(daemon.output)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
        // Everything was flushed before exit: the shutdown's last line is in the journal.
        #expect(await eventually { entries().contains { message($0) == "eventbusd stopped" } })
        let logged = entries()

        let started = try #require(logged.first { message($0).hasPrefix("eventbusd started from") })
        #expect(started["PRIORITY"] as? String == "6")
        #expect((started["CODE_FILE"] as? String)?.hasSuffix("BusHost.swift") == true)
        #expect(Int(started["CODE_LINE"] as? String ?? "") != nil)
        #expect(started["CODE_FUNC"] as? String != nil)
        #expect(started["EVENTBUS_MODULE"] == nil)

        // A module's own log (ModuleLog, bridged) carries the module's name as a field.
        let moduleLine = try #require(logged.first { message($0) == "first event timer.tick" })
        #expect(moduleLine["EVENTBUS_MODULE"] as? String == "counter")
        #expect(moduleLine["PRIORITY"] as? String == "6")

        // The refused module: an error (3) about that module.
        let refused = try #require(logged.first { message($0).contains("modules.broken") })
        #expect(refused["PRIORITY"] as? String == "3")
        #expect(refused["EVENTBUS_MODULE"] as? String == "broken")

        // Nothing went to standard error: the journal got it all.
        #expect(!daemon.output.contains("eventbusd started from"), "\(daemon.output)")
        await journald.stop()
    }

    /// `JOURNAL_STREAM` of another stream (inherited from a journald-logged shell, say), or a
    /// journald that does not listen: readable lines on standard error.
    @Test func eventbusdLogsToStandardErrorWhenNotConnectedToTheJournal() async throws {
        let directory = try TemporaryDirectory()
        let configPath = try directory.writeDaemonConfig("shutdown_timeout: 5s\n")

        let inherited = try SpawnedProcess(
            [BuildProducts.eventbusd, "--config", configPath],
            environment: environment(with: ["JOURNAL_STREAM": "1:1", JournaldWriter.socketPathVariable: directory.path + "/none"]),
            outputPath: directory.path + "/inherited.log")
        #expect(await eventually { inherited.output.contains("info eventbusd: [EventBusHost] ready; SIGHUP reloads") }, "\(inherited.output)")
        inherited.signal(SIGTERM)
        #expect(await inherited.exitStatus() == 0)

        let unreachablePath = directory.path + "/unreachable.log"
        try directory.write("unreachable.log", "")
        let unreachable = try SpawnedProcess(
            [BuildProducts.eventbusd, "--config", configPath],
            environment: environment(with: ["JOURNAL_STREAM": journalStreamValue(of: unreachablePath),
                                            JournaldWriter.socketPathVariable: directory.path + "/none"]),
            outputPath: unreachablePath)
        #expect(await eventually { unreachable.output.contains("ready; SIGHUP reloads") }, "\(unreachable.output)")
        #expect(unreachable.output.contains("<4>journald does not take entries at \(directory.path)/none"))
        unreachable.signal(SIGTERM)
        #expect(await unreachable.exitStatus() == 0)
    }
}
