import ControlProtocol
import Foundation
import Testing

/// What clients see while the host starts, reloads and restarts, through the real binaries:
/// requests wait until modules are active, `eventbus reload` exits with the reload's outcome,
/// `tail` follows a restarted host and `post` waits for one.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct HostRestartClientTests {
    /// A post sent while a module is still activating reaches it: the host answers clients only
    /// once every module is active (the first post of a socket activation is such a post).
    @Test func aPostMadeWhileModulesActivateReachesThem() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let config = try directory.write("eventbus.yaml", """
            control: {socket: \(socket)}
            modules:
              slow:
                path: \(BuildProducts.fixture("FixtureCounter"))
                config: {pattern: early.>, activation_delay_ms: 3000}
            """)
        let daemon = try DaemonProcessTests.Daemon(arguments: ["--config", config], in: directory)
        #expect(await eventually { FileManager.default.fileExists(atPath: socket) }, "\(daemon.output)")
        // Sent while the module activates (on a machine slow enough to take 3 s from here, the
        // post comes after and the test shows less, but holds).
        let sentWhileActivating = !daemon.output.contains("module slow active")
        let post = try await eventbus(["post", "--socket", socket, "early.bird"], in: directory)
        #expect(post.status == 0, "\(post.stderr)")
        if sentWhileActivating {
            #expect(daemon.output.contains("module slow active"), "answered only once the module was active: \(daemon.output)")
        }
        let report = try await eventbus(["post", "--socket", socket, "test.report"], in: directory)
        #expect(report.status == 0)
        let result = try await eventbus(["tail", "--socket", socket, "--json", "--since", "1", "--no-follow", "result.>"], in: directory)
        #expect(result.jsonLines.first?["fields"]?["count"]?.intValue == 1, "the module counted the early post: \(result.stdout)")
    }

    @Test func reloadExitsWithTheOutcomeAndARefusedConfigKeepsTheOldOne() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let good = "control: {socket: \(socket)}\nsources:\n  timers:\n    - {name: first, every: 1h}\n"
        let daemon = try await DaemonProcessTests.Daemon.running(good, in: directory)

        try directory.write("eventbus.yaml", good + "    - {name: second, every: 2h}\n")
        let applied = try await eventbus(["reload", "--socket", socket], in: directory)
        #expect(applied.status == 0, "\(applied.stderr)")
        #expect(applied.stdout.contains("reloaded") && applied.stdout.contains("2 timer(s)"), "\(applied.stdout)")

        try directory.write("eventbus.yaml", good + "    - {name: third, every: soon}\n")
        let refused = try await eventbus(["reload", "--socket", socket], in: directory)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("eventbus.yaml:5"), "names the file and line: \(refused.stderr)")
        #expect(refused.stderr.contains("the running config stays"), "\(refused.stderr)")
        let status = try await eventbus(["status", "--socket", socket], in: directory)
        #expect(status.status == 0, "the host runs on")
        #expect(daemon.output.contains("reload failed, keeping the running config"))

        let user = try TestUser("ebreload\(uniqueSuffix())")
        let stranger = try await eventbus(["reload", "--socket", socket], as: user, in: directory)
        #expect(stranger.status == 1)
        #expect(stranger.stderr.contains("permission denied") || stranger.stderr.contains("only root and uid"), "\(stranger.stderr)")
    }

    @Test func tailFollowsTheHostAcrossARestart() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let config = "control: {socket: \(socket)}\n"
        var daemon = try await DaemonProcessTests.Daemon.running(config, in: directory)
        let tail = try CLIProcess(["tail", "--socket", socket, "--count", "2", "user.>"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        #expect(try await eventbus(["post", "--socket", socket, "user.before"], in: directory).status == 0)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)

        daemon = try await DaemonProcessTests.Daemon.running(config, in: directory)
        #expect(await waitForTailing(socket, count: 1), "the tail came back: \(daemon.output)")
        #expect(try await eventbus(["post", "--socket", socket, "user.after"], in: directory).status == 0)
        let received = await tail.finish()
        #expect(received.status == 0, "\(received.stderr)")
        let lines = received.stdout.split(separator: "\n").map(String.init)
        #expect(lines.count == 4, "\(received.stdout)")
        #expect(lines.first?.contains("user.before") == true)
        #expect(lines.dropFirst().first?.contains("eventbusd is shutting down; waiting for it to come back") == true, "\(received.stdout)")
        #expect(lines.dropFirst(2).first?.contains("eventbusd restarted") == true, "\(received.stdout)")
        #expect(lines.last?.contains("user.after") == true)
        withExtendedLifetime(daemon) {}
    }

    @Test func tailWithExitOnRestartEndsWhenTheHostStops() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let daemon = try await DaemonProcessTests.Daemon.running("control: {socket: \(socket)}\n", in: directory)
        let tail = try CLIProcess(["tail", "--socket", socket, "--exit-on-restart"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        daemon.signal(SIGTERM)
        let ended = await tail.finish()
        #expect(ended.status == 1)
        #expect(ended.stderr.contains("eventbusd is shutting down"), "\(ended.stderr)")
    }

    /// A socket file nobody listens on is what a host that is restarting (without socket
    /// activation) leaves: `post` waits for the new host; with `--wait 0` it does not.
    @Test func postWaitsForAHostThatIsRestarting() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        try leaveStaleSocket(at: socket)

        let impatient = try await eventbus(["post", "--socket", socket, "--wait", "0", "user.now"], in: directory)
        #expect(impatient.status == 1)
        #expect(impatient.stderr.contains("does not accept connections"), "\(impatient.stderr)")

        let patient = try CLIProcess(["post", "--socket", socket, "--wait", "60", "--print-seq", "user.later"], in: directory)
        try await Task.sleep(for: .milliseconds(500))
        let daemon = try await DaemonProcessTests.Daemon.running("control: {socket: \(socket)}\n", in: directory)
        let posted = await patient.finish()
        #expect(posted.status == 0, "\(posted.stderr)")
        #expect(EventCursor(posted.stdout.trimmingCharacters(in: .newlines))?.sequence == 1, "posted once, as the new host's first event: \(posted.stdout)")
        withExtendedLifetime(daemon) {}
    }

    /// A socket file at `path` that nobody listens on: bound, listened on and closed.
    private func leaveStaleSocket(at path: String) throws {
        close(try SocketActivationTests.listeningSocket(at: path))
    }
}
