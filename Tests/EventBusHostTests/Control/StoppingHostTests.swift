import ControlProtocol
import Foundation
import Testing

/// What clients see while eventbusd shuts down, through the real binaries: a shutdown held up
/// by a module that drains only when the test lets it (FixtureStalled with `release_file`, and
/// a budget that only bounds a broken test). `status` and `stats` answer `stopping` with what is
/// left; what the next host should serve is refused with `shutting_down`, and the CLI hands it
/// to the next host — under socket activation, as the packaged `eventbusd.socket` runs it, and
/// with a socket the host binds itself.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct StoppingHostTests {
    /// A config whose one module, `slow`, holds the first `test.>` event until `release` exists.
    private func config(socket: String, release: String, in directory: TemporaryDirectory) throws -> String {
        try directory.write("eventbus.yaml", """
            shutdown_timeout: 600s
            control: {socket: \(socket)}
            modules:
              slow:
                path: \(BuildProducts.fixture("FixtureStalled"))
                isolation: none
                config: {release_file: \(release)}
            """)
    }

    /// eventbusd as systemd starts it for `eventbusd.socket`: the listening socket — which the
    /// test holds across the host's lives, as systemd does — as descriptor 3, with `LISTEN_FDS`,
    /// `LISTEN_FDNAMES` and `LISTEN_PID` (set by the shell that then execs eventbusd in its place).
    private func activated(config: String, listening socket: Int32, in directory: TemporaryDirectory) throws -> SpawnedProcess {
        try SpawnedProcess(["/bin/sh", "-c", "export LISTEN_PID=$$; exec \"$0\" \"$@\"", BuildProducts.eventbusd, "--config", config],
                           environment: environment(with: ["LISTEN_FDS": "1", "LISTEN_FDNAMES": "control"]),
                           outputPath: directory.path + "/eventbusd-\(UUID().uuidString).log", descriptors: [3: socket])
    }

    /// Holds the host's shutdown up: the module takes one event and holds it, five wait in its
    /// mailbox; then SIGTERM, and waits until the shutdown waits for that module.
    private func stopWithFiveQueued(_ socket: String, signal: () -> Void) async throws {
        try postMany(socket, name: "test.first", count: 1)
        #expect(await eventually { (try? slowModule(socket))?["delivered"]?.intValue == 1 })
        try postMany(socket, name: "test.item", count: 5)
        #expect(await eventually { (try? slowModule(socket))?["queued"]?.intValue == 5 })
        signal()
        #expect(await eventually { (try? ask(socket, ["op": "stats"]))?["stopping"]?["step"]?.stringValue == "draining_modules" })
    }

    private func slowModule(_ socket: String) throws -> JSON? {
        try ask(socket, ["op": "modules"])["modules"]?.arrayValue?.first { $0["name"]?.stringValue == "slow" }
    }

    @Test func aStoppingHostSaysWhatIsLeftAndTheNextHostServesWhatItRefused() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let listener = try SocketActivationTests.listeningSocket(at: socket)
        defer { close(listener) }
        _ = fcntl(listener, F_SETFD, FD_CLOEXEC)  // eventbusd gets it as descriptor 3 only
        let release = directory.path + "/release"
        let config = try config(socket: socket, release: release, in: directory)
        let first = try activated(config: config, listening: listener, in: directory)
        #expect(await eventually { first.output.contains("ready; SIGHUP reloads") }, "\(first.output)")
        let firstLife = try #require(try ask(socket, ["op": "status"])["life"]?.stringValue)
        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "1", "user.>"], in: directory)
        #expect(await waitForTailing(socket, count: 1))

        try await stopWithFiveQueued(socket) { first.signal(SIGTERM) }

        // Answered meanwhile: stopping, and what is left to drain.
        let status = try await eventbus(["status", "--socket", socket, "--json"], in: directory)
        #expect(status.status == 0, "\(status.stderr)")
        let answer = try #require(status.jsonLines.first)
        #expect(answer["state"]?.stringValue == "stopping", "\(status.stdout)")
        let stopping = try #require(answer["stopping"])
        #expect(stopping["step"]?.stringValue == "draining_modules")
        #expect(stopping["budget_seconds"]?.doubleValue == 600)
        let remaining = try #require(stopping["remaining_seconds"]?.doubleValue)
        #expect(remaining > 0 && remaining < 600, "\(stopping)")
        #expect(stopping["modules"]?.arrayValue?.map { "\($0["name"]?.stringValue ?? "?") \($0["queued"]?.intValue ?? -1)" } == ["slow 5"],
                "\(stopping)")
        #expect(stopping["tails"]?.intValue == 1 && stopping["rule_runs"]?.intValue == 0, "\(stopping)")
        let plain = try await eventbus(["status", "--socket", socket], in: directory)
        #expect(plain.stdout.hasPrefix("STOPPING:      draining modules; "), "\(plain.stdout)")
        #expect(plain.stdout.contains("still to drain: module(s) slow (active, 5 queued); 0 rule run(s); 1 tail(s)"), "\(plain.stdout)")
        #expect(try ask(socket, ["op": "stats"])["state"]?.stringValue == "stopping")

        // What the next host should serve is refused, saying so.
        let subscribe = try ask(socket, ["op": "subscribe", "patterns": ["user.>"]])
        #expect(subscribe["code"]?.stringValue == "shutting_down", "\(subscribe)")
        let impatient = try await eventbus(["post", "--socket", socket, "--wait", "0", "user.refused"], in: directory)
        #expect(impatient.status == 1)
        #expect(impatient.stderr.contains("shutting down; the event was not posted"), "\(impatient.stderr)")
        // A patient post asks again until the next host takes it.
        let patient = try CLIProcess(["post", "--socket", socket, "--wait", "600", "--print-seq", "user.during"], in: directory)
        #expect(await eventually { patient.stderr.contains("waiting for eventbusd: eventbusd: the host is shutting down") }, "\(patient.stderr)")

        try directory.write("release", "")
        #expect(await first.exitStatus() == 0, "\(first.output)")
        #expect(first.output.contains("eventbusd stopped") && !first.output.contains("not clean"), "drained in time: \(first.output)")

        let second = try activated(config: config, listening: listener, in: directory)
        #expect(await eventually { second.output.contains("ready; SIGHUP reloads") }, "\(second.output)")
        let posted = await patient.finish()
        #expect(posted.status == 0, "\(posted.stderr)")
        let cursor = try #require(EventCursor(posted.stdout.trimmingCharacters(in: .newlines)), "\(posted.stdout)")
        let secondLife = try ask(socket, ["op": "status"])["life"]?.stringValue
        #expect(cursor.life != firstLife && cursor.life == secondLife, "the next host posted it")
        // The tail followed to the next host and shows the post it took; the refused one was
        // posted nowhere.
        let followed = await tail.finish()
        #expect(followed.status == 0, "\(followed.stderr)")
        #expect(followed.jsonLines.map { $0["name"]?.stringValue } == ["user.during"], "\(followed.stdout)")
        #expect(followed.stderr.contains("eventbusd restarted"), "\(followed.stderr)")
        let held = try await eventbus(["tail", "--socket", socket, "--json", "--since", "1", "--no-follow", "user.>"], in: directory)
        #expect(held.jsonLines.compactMap { $0["name"]?.stringValue } == ["user.during"], "\(held.stdout)")
        second.signal(SIGTERM)
        #expect(await second.exitStatus() == 0, "\(second.output)")
    }

    /// A host that binds its own socket removes it at the end of its shutdown: a post it refused
    /// waits through that gap for the next host (after a host said it is stopping, no socket is
    /// a restart, not a host that is not running).
    @Test func aPostRefusedByAStoppingHostWaitsForTheNextOneOnItsOwnSocket() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let release = directory.path + "/release"
        let config = try config(socket: socket, release: release, in: directory)
        let first = try DaemonProcessTests.Daemon(arguments: ["--config", config], in: directory)
        #expect(await first.waitFor("ready; SIGHUP reloads"), "\(first.output)")
        try await stopWithFiveQueued(socket) { first.signal(SIGTERM) }

        let patient = try CLIProcess(["post", "--socket", socket, "--wait", "600", "--print-seq", "user.during"], in: directory)
        #expect(await eventually { patient.stderr.contains("waiting for eventbusd: eventbusd: the host is shutting down") }, "\(patient.stderr)")
        try directory.write("release", "")
        #expect(await first.exitStatus() == 0, "\(first.output)")
        #expect(!FileManager.default.fileExists(atPath: socket), "the stopped host removed its socket")
        #expect(patient.process.isRunning, "still waiting for the next host")

        let second = try DaemonProcessTests.Daemon(arguments: ["--config", config], in: directory)
        #expect(await second.waitFor("ready; SIGHUP reloads"), "\(second.output)")
        let posted = await patient.finish()
        #expect(posted.status == 0, "\(posted.stderr)")
        let secondLife = try ask(socket, ["op": "status"])["life"]?.stringValue
        #expect(EventCursor(posted.stdout.trimmingCharacters(in: .newlines))?.life == secondLife, "the next host posted it: \(posted.stdout)")
        second.signal(SIGTERM)
        #expect(await second.exitStatus() == 0, "\(second.output)")
    }
}
