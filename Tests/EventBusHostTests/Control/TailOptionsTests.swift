import ControlProtocol
import Foundation
import Testing

/// `eventbus tail` as a journalctl user types it, through the real CLI and eventbusd: field
/// matches filtered in the host, `--since`/`--until` with times or sequence numbers,
/// `--no-follow`, `-n`, the output formats, and `--files` relative to the caller's folder.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct TailOptionsTests {
    private func running(_ directory: TemporaryDirectory, rest: String = "") async throws -> (DaemonProcessTests.Daemon, String) {
        let socket = directory.path + "/control.sock"
        let daemon = try await DaemonProcessTests.Daemon.running("control:\n  socket: \(socket)\n\(rest)", in: directory)
        return (daemon, socket)
    }

    private func post(_ socket: String, _ name: String, _ fields: [String: JSON] = [:]) throws -> Int64 {
        let answer = try ask(socket, ["op": "post", "name": .string(name), "fields": .object(fields)])
        return try #require(answer["seq"]?.intValue, "\(answer)")
    }

    private func tail(_ arguments: [String], _ socket: String, _ directory: TemporaryDirectory) async throws -> CLIResult {
        try await eventbus(["tail", "--socket", socket] + arguments, in: directory)
    }

    @Test func fieldMatchesAreOrWithinAFieldAndAcrossFieldsAndWithPatterns() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await running(directory)
        defer { withExtendedLifetime(daemon) {} }
        for (env, n) in [("prod", 1), ("dev", 2), ("prod", 3), ("test", 3), ("prod", 4)] {
            _ = try post(socket, "app.deploy", ["env": .string(env), "n": .int(Int64(n))])
        }
        _ = try post(socket, "other.deploy", ["env": "prod", "n": .int(3)])
        func ns(_ result: CLIResult) -> [Int64] { result.jsonLines.compactMap { $0["fields"]?["n"]?.intValue } }

        let prod = try await tail(["--json", "--no-follow", "--since", "1", "env=prod"], socket, directory)
        #expect(prod.status == 0, "\(prod.stderr)")
        #expect(ns(prod) == [1, 3, 4, 3], "the last from other.deploy: no pattern given")
        let prodOrTest = try await tail(["--json", "--no-follow", "--since", "1", "app.*", "env=prod", "env=test"], socket, directory)
        #expect(ns(prodOrTest) == [1, 3, 3, 4])
        let both = try await tail(["--json", "--no-follow", "--since", "1", "app.>", "env=prod", "n=3"], socket, directory)
        #expect(ns(both) == [3], "AND across fields; an int matches its text")
        let none = try await tail(["--json", "--no-follow", "--since", "1", "missing=x"], socket, directory)
        #expect(none.status == 0 && none.jsonLines.isEmpty)
        let globbed = try await tail(["--json", "--no-follow", "--since", "1", "app.*", "env=pr*", "env=t?st"], socket, directory)
        #expect(ns(globbed) == [1, 3, 3, 4], "a value with * or ? is a glob")
        let tooMany = try await tail(["--json", "--no-follow", "env=" + String(repeating: "ab*", count: 600)], socket, directory)
        #expect(tooMany.status != 0 && tooMany.stderr.contains("at most 1024"), "\(tooMany.stderr)")

        // Live too: only the matching event reaches the tail, then --count ends it.
        let live = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "1", "env=live"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        _ = try post(socket, "app.deploy", ["env": "dev", "n": .int(10)])
        _ = try post(socket, "app.deploy", ["env": "live", "n": .int(11)])
        #expect(ns(await live.finish()) == [11])
    }

    @Test func sinceAndUntilTakeTimesAndSequenceNumbers() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await running(directory)
        defer { withExtendedLifetime(daemon) {} }
        let day = Calendar.current.startOfDay(for: Date())
        let first = try post(socket, "app.step", ["n": .int(1)])
        // Between the two posts on the host's own clock: the first was stamped before this
        // returned, the second will be stamped after it.
        let between = Date().timeIntervalSince1970
        let second = try post(socket, "app.step", ["n": .int(2)])
        let third = try post(socket, "app.step", ["n": .int(3)])
        func ns(_ result: CLIResult) -> [Int64] { result.jsonLines.compactMap { $0["fields"]?["n"]?.intValue } }

        let sinceTime = try await tail(["--json", "--no-follow", "--since", String(format: "@%.6f", between)], socket, directory)
        #expect(sinceTime.status == 0, "\(sinceTime.stderr)")
        #expect(ns(sinceTime) == [2, 3])
        let hourAgo = try await tail(["--json", "--no-follow", "--since", "1h", "app.>"], socket, directory)
        #expect(ns(hourAgo) == [1, 2, 3])
        // A value with a leading dash is the value, as journalctl reads `--since -5m`.
        let dashed = try await tail(["--json", "--no-follow", "--since", "-5m", "app.>"], socket, directory)
        #expect(dashed.status == 0 && ns(dashed) == [1, 2, 3], "\(dashed.stderr)")
        let today = try await tail(["--json", "--no-follow", "--since", "today", "app.>"], socket, directory)
        if Calendar.current.startOfDay(for: Date()) == day { #expect(ns(today) == [1, 2, 3], "\(today.stderr)") }
        let window = try await tail(["--json", "--since", "#\(first)", "--until", String(second)], socket, directory)
        #expect(window.status == 0, "ends by itself once past --until: \(window.stderr)")
        #expect(ns(window) == [1, 2])
        let untilTime = try await tail(["--json", "--since", "1", "--until", String(format: "@%.6f", between), "app.>"], socket, directory)
        #expect(ns(untilTime) == [1])
        #expect(third > second)

        // --until ahead of now: the tail ends when that time comes, with nothing posted.
        let ahead = try await tail(["--json", "--until", "+300ms", "nothing.>"], socket, directory)
        #expect(ahead.status == 0 && ahead.jsonLines.isEmpty, "\(ahead.stderr)")

        let lines = try await tail(["-n", "2", "--no-follow", "--json", "app.>"], socket, directory)
        #expect(ns(lines) == [2, 3])

        for bad in ["yesterdayish", "2026-02-30", "25:00", "10 parsecs"] {
            let refused = try await tail(["--since", bad], socket, directory)
            #expect(refused.status == 64 && refused.stderr.contains("neither an event cursor nor a time"), "\(bad): \(refused.stderr)")
        }
    }

    @Test func aTimeReplayThatTheRingCannotCoverSaysSo() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await running(directory, rest: "  replay_events: 2\n")
        defer { withExtendedLifetime(daemon) {} }
        for n in 1...5 { _ = try post(socket, "app.step", ["n": .int(Int64(n))]) }
        let result = try await tail(["--json", "--no-follow", "--since", "10min"], socket, directory)
        #expect(result.status == 0)
        #expect(result.jsonLines.compactMap { $0["fields"]?["n"]?.intValue } == [4, 5])
        #expect(result.stderr.contains("no longer holds every event since 10min; its replay starts at #4"), "\(result.stderr)")
    }

    @Test func outputFormatsShortCatJsonPrettyAndExportThatTheJournalReads() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await running(directory)
        defer { withExtendedLifetime(daemon) {} }
        _ = try post(socket, "app.note", ["message": "hello there", "level": "info", "multi": "line one\nline two"])

        // In a zone 5:30 ahead of UTC (a POSIX TZ string: no tzdata needed), --utc shows UTC.
        func minutes(_ arguments: [String]) async throws -> Int {
            let result = await (try CLIProcess(["tail", "--socket", socket, "--no-follow", "--since", "1"] + arguments,
                                               in: directory, environment: ["TZ": "XST-05:30"])).finish()
            #expect(result.stdout.contains("app.note (user)"), "\(result.stdout)")
            let clock = try #require(result.lines.first?.split(separator: " ")[2].split(separator: ":"))
            return Int(clock[0])! * 60 + Int(clock[1])!
        }
        let local = try await minutes([])
        let utc = try await minutes(["--utc"])
        #expect((local - utc + 1440) % 1440 == 330)

        let cat = try await tail(["--no-follow", "--since", "1", "-o", "cat"], socket, directory)
        #expect(cat.stdout == "hello there\n")

        let pretty = try await tail(["--no-follow", "--since", "1", "--output", "json-pretty"], socket, directory)
        #expect(pretty.stdout.contains("\n  \"fields\": {\n    \"level\": \"info\",\n"), "\(pretty.stdout)")

        let export = try await tail(["--no-follow", "--since", "1", "-o", "export"], socket, directory)
        #expect(export.status == 0)
        let exportPath = try directory.write("events.export", export.stdout)
        let journalFile = directory.path + "/imported.journal"
        #expect(try runShell("/lib/systemd/systemd-journal-remote -o \(journalFile) - < \(exportPath)") == 0)
        let fields = try readShell("journalctl --file \(journalFile) -o json")
        let entry = try JSON.parse(fields.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(entry["MESSAGE"] == "hello there")
        #expect(entry["EVENTBUS_NAME"] == "app.note")
        #expect(entry["EVENTBUS_FIELD_LEVEL"] == "info")
        #expect(entry["EVENTBUS_FIELD_MULTI"] == "line one\nline two", "a newline in a value stays inside its field")

        #expect(try await tail(["--json", "-o", "cat"], socket, directory).status == 64)

        // Without a message: what the event is about (a file change's path), or its name.
        let next = try post(socket, "fs.modified", ["path": "/etc/hosts"])
        _ = try post(socket, "fs.moved", ["old_path": "/srv/a", "path": "/srv/b"])
        _ = try post(socket, "app.bare")
        let bare = try await tail(["--no-follow", "--since", "\(next)", "-o", "cat"], socket, directory)
        #expect(bare.stdout == "fs.modified /etc/hosts\nfs.moved /srv/a → /srv/b\napp.bare\n", "\(bare.stdout)")
    }

    @Test func relativeFilesAreTheCallersNotTheDaemons() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await running(directory)
        defer { withExtendedLifetime(daemon) {} }
        let caller = directory.path + "/caller"
        try FileManager.default.createDirectory(atPath: caller + "/watched", withIntermediateDirectories: true)
        // The match also filters the tail's own source (FileManager writes through a temp file).
        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "1", "--files", "watched",
                                   "path=\(caller)/watched/new.txt"],
                                  in: directory, workingDirectory: caller)
        #expect(await waitForTailing(socket, count: 1))
        let stats = try ask(socket, ["op": "status"])
        #expect("\(stats)".contains(caller + "/watched"), "\(stats)")
        #expect(FileManager.default.createFile(atPath: caller + "/watched/new.txt", contents: Data("x".utf8)))
        let result = await tail.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.jsonLines.first?["fields"]?["path"] == .string(caller + "/watched/new.txt"))
    }
}

/// Runs `command` with `sh -c`; its exit status.
func runShell(_ command: String) throws -> Int32 {
    try runTool("/bin/sh", ["-c", command])
}

/// Runs `command` with `sh -c` and returns what it printed.
func readShell(_ command: String) throws -> String {
    let process = Process()
    let pipe = Pipe()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", command]
    process.standardOutput = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}
