import ControlProtocol
import EventBusHost
import Foundation
import Testing

/// Exec modules (docs/modules-any-language.md): real programs — Python with the helper, bash,
/// and hostile ones (Tests/Fixtures/exec-modules) — run by the real eventbusd, driven and
/// watched with the real `eventbus` CLI. No timing is asserted: every wait is for something
/// the host says or does, within the suites' generous patience.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ExecModuleTests {
    typealias Daemon = DaemonProcessTests.Daemon

    static func fixture(_ name: String) -> String {
        BuildProducts.repository + "/Tests/Fixtures/exec-modules/" + name
    }

    /// A daemon with one exec module `name`: `exec` and further lines of its entry.
    func daemon(_ directory: TemporaryDirectory, name: String, exec: [String], entry: String = "",
                top: String = "") async throws -> (Daemon, socket: String) {
        let program = exec.map { "\"\($0)\"" }.joined(separator: ", ")
        let (yaml, socket) = controlConfig(directory, rest: """
            \(top)
            modules:
              \(name):
                exec: [\(program)]
            \(entry.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n"))
            """)
        return (try await Daemon.running(yaml, in: directory), socket)
    }

    /// The module's row of `eventbus modules --json`.
    func module(_ name: String, _ socket: String, in directory: TemporaryDirectory) async throws -> JSON? {
        let result = try await eventbus(["modules", "--json", "--socket", socket], in: directory)
        return result.jsonLines.first?["modules"]?.arrayValue?.first { $0["name"]?.stringValue == name }
    }

    /// `eventbus status` answers (the host is up and its control loop free).
    func statusAnswers(_ socket: String, in directory: TemporaryDirectory) async throws -> Bool {
        try await eventbus(["status", "--socket", socket], in: directory).status == 0
    }

    /// Posts `user.ping n=N` and returns the `user.pong` lines a tail saw for it.
    func ping(_ n: Int, _ socket: String, in directory: TemporaryDirectory) async throws -> [JSON] {
        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "1", "user.pong"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        #expect(try await eventbus(["post", "--socket", socket, "user.ping", "n=\(n)"], in: directory).status == 0)
        return await tail.finish().jsonLines
    }

    @Test func aPythonModuleWithTheHelperGetsItsConfigAndPostsWhatATailSees() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await daemon(directory, name: "pong", exec: [Self.fixture("pong.py")],
                                                entry: "config: { prefix: from-config }")
        #expect(await daemon.waitFor("pong ready, prefix from-config"), "\(daemon.output)")
        let row = try await module("pong", socket, in: directory)
        #expect(row?["isolation"]?.stringValue == "exec")
        #expect(row?["state"]?.stringValue == "active")
        #expect(row?["pid"]?.intValue != nil)
        let pongs = try await ping(7, socket, in: directory)
        #expect(pongs.count == 1)
        #expect(pongs.first?["source"]?.stringValue == "pong")
        #expect(pongs.first?["fields"]?["n"]?.intValue == 7)
        #expect(pongs.first?["fields"]?["prefix"]?.stringValue == "from-config")
        // The table says so too.
        let table = try await eventbus(["modules", "--socket", socket], in: directory)
        #expect(table.stdout.contains("exec (pid"), "\(table.stdout)")
    }

    @Test func aBashModuleReadsLinesAndPosts() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await daemon(directory, name: "shell", exec: [Self.fixture("pong.sh")])
        #expect(await daemon.waitFor("bash pong ready"), "\(daemon.output)")
        let pongs = try await ping(42, socket, in: directory)
        #expect(pongs.first?["fields"]?["n"]?.intValue == 42)
        #expect(pongs.first?["fields"]?["shell"]?.stringValue == "bash")
        #expect(pongs.first?["source"]?.stringValue == "shell")
    }

    @Test func configSubscriptionsWithFieldMatchesFilterWhatTheProgramGets() async throws {
        let directory = try TemporaryDirectory()
        // The bash module subscribes user.ping itself; its config adds one with a match, and
        // the host sends each event once.
        let (daemon, socket) = try await daemon(directory, name: "shell", exec: [Self.fixture("pong.sh")],
                                                entry: "subscribe: [\"user.ping n=2\"]")
        #expect(await daemon.waitFor("bash pong ready"), "\(daemon.output)")
        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "3", "user.pong"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        for n in 1...3 {
            #expect(try await eventbus(["post", "--socket", socket, "user.ping", "n=\(n)"], in: directory).status == 0)
        }
        let pongs = await tail.finish().jsonLines.compactMap { $0["fields"]?["n"]?.intValue }
        #expect(pongs == [1, 2, 3], "each event once, though two subscriptions matched n=2")
    }

    @Test func aCrashIsAnnouncedWithItsExitStatusAndTheProgramRestarted() async throws {
        let directory = try TemporaryDirectory()
        // Held to the end: the daemon is killed when it is let go.
        let (daemon, socket) = try await daemon(directory, name: "exits", exec: [Self.fixture("hostile.py"), "exits"],
                                                entry: "subscribe: [\"user.ping\"]")
        let firstPID = try await module("exits", socket, in: directory)?["pid"]?.intValue
        let crashes = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "1", "module.crashed"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        #expect(try await eventbus(["post", "--socket", socket, "user.ping"], in: directory).status == 0)
        let crash = await crashes.finish().jsonLines.first
        #expect(crash?["fields"]?["module"]?.stringValue == "exits")
        #expect(crash?["fields"]?["exit_status"]?.intValue == 3)
        #expect(crash?["fields"]?["reason"]?.stringValue == "exited with status 3")
        #expect(crash?["fields"]?["restarting"]?.boolValue == true)
        var row: JSON?
        let restarted = await eventuallyAsync {
            row = try await module("exits", socket, in: directory)
            return row?["state"]?.stringValue == "active" && row?["pid"]?.intValue != firstPID && row?["restarts"]?.intValue == 1
        }
        #expect(restarted, "\(String(describing: row))")
        #expect(row?["last_crash"]?.stringValue == "exited with status 3")
        #expect(daemon.output.contains("module program crashed: exited with status 3"), "\(daemon.output)")
    }

    @Test func garbageAndA100MBLineAreProtocolErrorsCountedAndTheModuleGoesOn() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await daemon(directory, name: "garbage", exec: [Self.fixture("hostile.py"), "garbage"])
        // From the first event on: it may have posted before this tail started.
        let after = try CLIProcess(["tail", "--socket", socket, "--json", "--since", "1", "--count", "1", "hostile.after"], in: directory)
        let posted = await after.finish().jsonLines.first
        #expect(posted?["source"]?.stringValue == "garbage", "\(daemon.output)")
        #expect(try await statusAnswers(socket, in: directory))
        let row = try await module("garbage", socket, in: directory)
        #expect(row?["errors"]?.intValue == 5, "\(String(describing: row))")
        #expect(row?["state"]?.stringValue == "active")
        #expect(row?["restarts"]?.intValue == 0)
        let log = daemon.output
        #expect(log.contains("module=garbage"))
        #expect(log.contains("protocol error: a line is not JSON"))
        #expect(log.contains("protocol error: unknown line type \"dance\""))
        #expect(log.contains("protocol error: post refused: event name \"bad..name\""))
        #expect(log.contains("protocol error: a line of 104857600 bytes was left out"))
    }

    @Test func aStandardErrorFloodIsLoggedLineByLineWithinTheLogLimit() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await daemon(directory, name: "noisy", exec: [Self.fixture("hostile.py"), "stderr-flood"])
        let after = try CLIProcess(["tail", "--socket", socket, "--json", "--since", "1", "--count", "1", "hostile.after"], in: directory)
        #expect(await after.finish().jsonLines.first?["source"]?.stringValue == "noisy", "\(daemon.output)")
        #expect(await daemon.waitFor("stderr: (a line of 102400 bytes, longer than 4096, left out)"), "\(daemon.output.suffix(2000))")
        #expect(try await statusAnswers(socket, in: directory))
        let log = daemon.output
        #expect(log.contains("module=noisy") && log.contains("stderr: line 0"))
        // The per-module log limit (1 000 at once, then 100 a second) let through a small part.
        let logged = log.split(separator: "\n").filter { $0.contains("stderr: line ") }.count
        #expect(logged < 50_000, "\(logged) of 100 000 lines logged")
    }

    @Test func aPostFloodIsBoundedByTheAllowanceAndCounted() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await daemon(directory, name: "flood", exec: [Self.fixture("hostile.py"), "flood"],
                                                entry: "posts_per_second: 100")
        #expect(await daemon.waitFor("post(s) dropped: the module posts faster than its posts_per_second (100)"), "\(daemon.output)")
        #expect(try await statusAnswers(socket, in: directory))
        // At most the burst and what a second refills got through, far from the 50 000 it wrote.
        let stats = try await eventbus(["status", "--json", "--socket", socket], in: directory).jsonLines.first
        let posted = stats?["posted"]?.intValue ?? .max
        #expect(posted < 50_000 / 2, "\(String(describing: stats))")
    }

    @Test func aProgramThatNeverReadsIsStalledAndItsEventsDroppedAndCounted() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await daemon(directory, name: "deaf", exec: [Self.fixture("hostile.py"), "deaf"],
                                                entry: "subscribe: [\"load.>\"]\nmailbox_capacity: 50")
        #expect(await daemon.waitFor("deaf: not reading"))
        // Big events fill its input, then its mailbox.
        let padding = String(repeating: "p", count: 16 << 10)
        let lines = (1...300).map { #"{"name":"load.big","fields":{"n":\#($0),"pad":"\#(padding)"}}"# }
        let input = try directory.write("load.jsonl", lines.joined(separator: "\n") + "\n")
        let post = await (try CLIProcess(["post", "--stdin", "--socket", socket], in: directory, input: input)).finish()
        #expect(post.status == 0, "\(post.stderr)")
        var row: JSON?
        let stalled = await eventuallyAsync {
            row = try await module("deaf", socket, in: directory)
            return row?["state"]?.stringValue == "stalled" && (row?["dropped"]?.intValue ?? 0) > 0
        }
        #expect(stalled, "\(String(describing: row))")
        #expect(try await statusAnswers(socket, in: directory))
        let table = try await eventbus(["modules", "--socket", socket], in: directory)
        #expect(table.stdout.contains("stalled"), "\(table.stdout)")
    }

    @Test func aProgramThatClosesItsOutputIsEndedAndSaysWhy() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await daemon(directory, name: "mute", exec: [Self.fixture("hostile.py"), "closes-stdout"],
                                                entry: "worker: { restart_delay: 30s }")
        #expect(await daemon.waitFor("it closed its standard output, so the host ended it; the program killed by signal 9 (SIGKILL)"),
                "\(daemon.output)")
        let line = daemon.output.split(separator: "\n").first { $0.contains("it closed its standard output, so the host ended it") }
        #expect(line?.contains("; restart 1 in ") == true, "\(line ?? "")")
        #expect(try await statusAnswers(socket, in: directory))
        // Once — or more, if the 30 s restart delay (the longest) passed before this asks, as on
        // a loaded machine, and the restarted program closed its output again.
        #expect(try await module("mute", socket, in: directory)?["restarts"]?.intValue ?? 0 >= 1)
    }

    @Test func childrenItForkedDieWithItWhenItExits() async throws {
        let directory = try TemporaryDirectory()
        let pidFile = directory.path + "/children"
        let (daemon, socket) = try await daemon(directory, name: "forks", exec: [Self.fixture("hostile.py"), "forks", pidFile],
                                                entry: "worker: { restart_delay: 30s }")
        #expect(await eventually { FileManager.default.fileExists(atPath: pidFile) })
        let children = try String(contentsOfFile: pidFile, encoding: .utf8).split(separator: " ").compactMap { Int32($0) }
        #expect(children.count == 3)
        #expect(await daemon.waitFor("module program crashed: exited with status 0"), "\(daemon.output)")
        #expect(await eventually { children.allSatisfy(Self.isGone) }, "children left: \(children.filter { !Self.isGone($0) })")
        #expect(try await statusAnswers(socket, in: directory))
    }

    @Test func aProgramThatIgnoresSIGTERMIsKilledAtTheShutdownTimeout() async throws {
        let directory = try TemporaryDirectory()
        let pidFile = directory.path + "/pid"
        let (daemon, _) = try await daemon(directory, name: "stubborn", exec: [Self.fixture("hostile.py"), "ignores-term", pidFile],
                                           top: "shutdown_timeout: 2s")
        #expect(await eventually { FileManager.default.fileExists(atPath: pidFile) })
        let pid = try #require(Int32(try String(contentsOfFile: pidFile, encoding: .utf8)))
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
        #expect(Self.isGone(pid))
        #expect(daemon.output.contains("module stubborn did not finish deactivating within"), "\(daemon.output)")
    }

    @Test func aReloadThatChangesExecOrConfigStartsANewProgram() async throws {
        let directory = try TemporaryDirectory()
        let (daemon, socket) = try await daemon(directory, name: "pong", exec: [Self.fixture("pong.py")],
                                                entry: "config: { prefix: one }")
        #expect(await daemon.waitFor("pong ready, prefix one"))
        let before = try await module("pong", socket, in: directory)?["pid"]?.intValue
        // The same program with another config: a new program reads it in its hello.
        let (yaml, _) = controlConfig(directory, rest: """
            modules:
              pong:
                exec: ["\(Self.fixture("pong.py"))", "--again"]
                config: { prefix: two }
            """)
        _ = try directory.write("eventbus.yaml", yaml)
        #expect(try await eventbus(["reload", "--socket", socket], in: directory).status == 0)
        #expect(await daemon.waitFor("pong ready, prefix two"), "\(daemon.output)")
        #expect(daemon.output.contains("module pong restarts: exec settings changed"))
        let after = try await module("pong", socket, in: directory)?["pid"]?.intValue
        #expect(after != nil && after != before)
        #expect(try await ping(1, socket, in: directory).first?["fields"]?["prefix"]?.stringValue == "two")
        // Only its config: a program reads it once, in its hello, so a new one starts too.
        let (three, _) = controlConfig(directory, rest: """
            modules:
              pong:
                exec: ["\(Self.fixture("pong.py"))", "--again"]
                config: { prefix: three }
            """)
        _ = try directory.write("eventbus.yaml", three)
        #expect(try await eventbus(["reload", "--socket", socket], in: directory).status == 0)
        #expect(await daemon.waitFor("pong ready, prefix three"), "\(daemon.output)")
        #expect(daemon.output.contains("module pong restarts with its new config"))
        #expect(try await ping(2, socket, in: directory).first?["fields"]?["prefix"]?.stringValue == "three")
    }

    /// `--check-config` checks an exec module's program as its start would: trusted, a file,
    /// executable. An untrusted one is refused at start too, and the host runs on without it.
    @Test func aProgramOthersCanWriteIsRefusedByTheCheckAndAtStart() async throws {
        let directory = try TemporaryDirectory()
        let program = try directory.write("writable.sh", "#!/bin/sh\nexec cat >/dev/null\n")
        chmod(program, 0o757)
        let config = try directory.write("check.yaml", """
            modules:
              good:
                exec: ["\(Self.fixture("pong.sh"))"]
              writable:
                exec: ["\(program)"]
            """)
        let check = try Daemon(arguments: ["--check-config", "--config", config], in: directory)
        #expect(await check.exitStatus() == 1, "\(check.output)")
        #expect(check.output.contains("module good: exec \(Self.fixture("pong.sh")), 0 subscription(s)"), "\(check.output)")
        #expect(check.output.contains("module writable: \(config):5: program refused: \(program) is writable by every user"), "\(check.output)")
        #expect(check.output.contains("1 problem(s) found"))

        let (daemon, socket) = try await daemon(directory, name: "writable", exec: [program])
        #expect(await daemon.waitFor("program refused: \(program) is writable by every user"), "\(daemon.output)")
        #expect(try await module("writable", socket, in: directory)?["state"]?.stringValue == "failed")
        #expect(try await statusAnswers(socket, in: directory))
    }

    /// What a newcomer does: scaffold a Python module, add its sample section to the config,
    /// post its ping and see its pong in a tail.
    @Test func aScaffoldedPythonModuleRunsAsItIs() async throws {
        let directory = try TemporaryDirectory()
        let scaffold = try await eventbus(["module", "new", "--lang", "python", "greeter", "--path", directory.path + "/modules"],
                                          in: directory)
        #expect(scaffold.status == 0, "\(scaffold.stderr)")
        let folder = directory.path + "/modules/greeter"
        #expect(FileManager.default.isExecutableFile(atPath: folder + "/greeter.py"))
        #expect(FileManager.default.fileExists(atPath: folder + "/eventbus_module.py"))
        let sample = try String(contentsOfFile: folder + "/sample.yaml", encoding: .utf8)
        let (yaml, socket) = controlConfig(directory, rest: sample)
        let daemon = try await Daemon.running(yaml, in: directory)
        #expect(await daemon.waitFor("greeter started, greeting 'hello'"), "\(daemon.output)")
        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "1", "user.greeter.pong"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        #expect(try await eventbus(["post", "--socket", socket, "user.greeter.ping", "who=me"], in: directory).status == 0)
        let pong = await tail.finish().jsonLines.first
        #expect(pong?["fields"]?["greeting"]?.stringValue == "hello")
        #expect(pong?["fields"]?["who"]?.stringValue == "me")
        // A second time is refused: nothing is overwritten.
        let again = try await eventbus(["module", "new", "--lang", "python", "greeter", "--path", directory.path + "/modules"], in: directory)
        #expect(again.status == 1 && again.stderr.contains("already exists"), "\(again.stderr)")
    }

    /// Whether `pid` has ended: no such process, or a zombie no one reaped yet.
    static func isGone(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return true }
        return stat[stat.index(close, offsetBy: 2)] == "Z"
    }
}

/// Polls an async `condition` (it runs the CLI) until it holds or the suites' patience passes.
private func eventuallyAsync(_ condition: () async throws -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + patience
    while ContinuousClock.now < deadline {
        if (try? await condition()) == true { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return false
}
