import EventBusKit
import EventSources
import Foundation
import Testing

@Suite("Journal: matches", .serialized)
struct JournalMatchTests {
    @Test("&& and || keep sd-journal's shape: a disjunction of terms; && distributes and intersects")
    func algebra() {
        let unit = JournalMatch.unit("a.service")
        #expect(unit.description == "_SYSTEMD_UNIT=a.service")
        #expect((unit && .priority(atMost: .err)).description
            == "PRIORITY=0 PRIORITY=1 PRIORITY=2 PRIORITY=3 _SYSTEMD_UNIT=a.service")
        let either = JournalMatch.identifier("x") || .field("FOO", "1")
        #expect(either.terms.count == 2)
        #expect((either && unit).terms.count == 2)
        #expect((JournalMatch.all || unit) == .all)
        #expect((JournalMatch.all && unit) == unit)
        let narrowed = JournalMatch.priority(atMost: .warning) && .priority(atMost: .crit)
        #expect(narrowed == .priority(atMost: .crit))
        let impossible = JournalMatch.unit("a.service") && .unit("b.service")
        #expect(impossible.matchesNothing)
        #expect((impossible || unit) == unit)
    }

    @Test("malformed watches are refused when made, not later in the reader")
    func validation() throws {
        let bus = Bus()
        let state = try TemporaryDirectory("eventbus-journal-test")
        JournalDriver.register(on: bus, stateDirectory: state.path)
        func code(_ watch: JournalWatch) -> EventBusError.Code? {
            do { _ = try bus.journal(watch) } catch let error as EventBusError { return error.code } catch { return nil }
            return nil
        }
        #expect(code(JournalWatch(match: .field("lower", "x"))) == .invalidJournalWatch)
        #expect(code(JournalWatch(match: .unit("a") && .unit("b"))) == .invalidJournalWatch)
        #expect(code(JournalWatch(consumer: "../escape")) == .invalidJournalWatch)
        #expect(code(JournalWatch(location: .directory("relative"))) == .invalidJournalWatch)
        #expect(code(JournalWatch(fields: .standard(plus: ["bad name"]))) == .invalidJournalWatch)
        #expect(code(JournalWatch(match: .unit("ok.service"), location: .directory("/nonexistent"), consumer: "ok-1")) == nil)
        #expect(throws: EventBusError.self) { try Bus().journal(matching: .all) }  // no driver: sourceUnavailable
    }

    @Test("unit, priority and OR matches, with a writer moved into a cgroup named like a unit")
    func unitMatches() async throws {
        let journald = try await PrivateJournald.start()
        let unit = "eventbus-journal-test-\(getpid()).service"
        let cgroup = try JournalUnitCgroup(unit)
        let logDirectory = journald.logDirectory
        func watch(_ match: JournalMatch) throws -> JournalRecorder {
            let recorder = try JournalRecorder()
            try recorder.follow(JournalWatch(match: match, location: .directory(logDirectory)))
            return recorder
        }
        let inUnit = try watch(.unit(unit))
        let severe = try watch(.unit(unit) && .priority(atMost: .err))
        let either = try watch(.unit(unit) && .priority(atMost: .err) || .identifier("outside"))
        #expect(await eventually { inUnit.isFollowing && severe.isFollowing && either.isFollowing })

        // The unit's writer is one logger process that sends the lines it reads from stdin and
        // stays alive until the test closes stdin, after its entries were seen: journald reads
        // the sender's cgroup from /proc when it stamps _SYSTEMD_UNIT, and finds nothing for a
        // process that has already exited (measured: entries without a unit under load).
        let devLog = journald.syslogSocketPath
        let stdin = try journalPipe()
        let errors = try TemporaryDirectory("eventbus-journal-test")
        let errorFD = open(errors.path + "/stderr", O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        defer { close(errorFD) }
        let pid = try journalSpawn(["/bin/sh", "-c", """
            echo $$ > \(cgroup.path)/cgroup.procs && exec logger --socket \(devLog) -t unit-writer --prio-prefix
            """], stdin: stdin[0], stderr: errorFD)
        close(stdin[0])
        // Syslog prefixes: <14> is user.info, <11> user.err.
        _ = "<14>u-info\n<11>u-err\n".withCString { write(stdin[1], $0, strlen($0)) }
        JournalWriter(socket: journald.socketPath).send("not in the unit", identifier: "outside", priority: .err)
        let arrived = await eventually { inUnit.entries.count == 2 && severe.entries.count == 1 && either.entries.count == 2 }
        #expect(arrived, """
            writer's stderr: \((try? String(contentsOfFile: errors.path + "/stderr", encoding: .utf8)) ?? "")
            journal: \(journalctlMessages(logDirectory, format: "json").filter { $0.contains("unit-writer") })
            """)
        close(stdin[1])
        #expect(await journalWaitAsync(pid) == 0)
        #expect(inUnit.messages == ["u-info", "u-err"])
        #expect(inUnit.entries.allSatisfy { $0.unit == unit && $0.identifier == "unit-writer" })
        #expect(severe.messages == ["u-err"])
        #expect(Set(either.messages) == ["u-err", "not in the unit"])
    }
}

/// A cgroup named like a systemd unit, where journald finds `_SYSTEMD_UNIT` for a writer moved
/// into it. Uses the unified (v2) hierarchy: `/sys/fs/cgroup/unified` on this hybrid layout,
/// `/sys/fs/cgroup` on a pure cgroup v2 machine. Removed at deinit (when empty).
final class JournalUnitCgroup {
    let path: String

    init(_ unit: String) throws {
        let base = access("/sys/fs/cgroup/unified/cgroup.procs", F_OK) == 0 ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup"
        path = base + "/system.slice/" + unit
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { rmdir(path) }
}
