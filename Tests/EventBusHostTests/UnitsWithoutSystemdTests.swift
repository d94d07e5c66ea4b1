import Foundation
import Testing

/// A units watch on a machine whose PID 1 is not systemd — a container, a CI runner, this
/// test's machine — through the real eventbusd and CLI: the tail says at once that there is no
/// systemd manager to follow and which address was tried, a subscriber joining later hears the
/// same, and `status` shows the source unavailable and why. Where systemd is PID 1 the suite
/// has nothing to show (the container's UnitsTests cover following it).
@Suite(.tags(.realDaemon), .skippable(.realDaemon),
       .enabled(if: !FileManager.default.fileExists(atPath: "/run/systemd/system"), "systemd is PID 1 here"))
struct UnitsWithoutSystemdTests {
    @Test func theTailAndStatusSayThereIsNoSystemdToFollowAndWhereTheyLooked() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let daemon = try await DaemonProcessTests.Daemon.running("control: {socket: \(socket)}\n", in: directory)
        let noManager = "no systemd manager to follow: PID 1 is not systemd (no /run/systemd/system)"

        // The first tail hears it as its first event, and keeps following (the watch retries).
        let first = try CLIProcess(["tail", "--socket", socket, "--units", "*", "--json", "--count", "2"], in: directory)
        #expect(await eventually { first.stdout.contains("units.gap") }, "\(first.stdout)")
        let gap = try #require(first.stdout.split(separator: "\n").first.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] })
        let reason = (gap["fields"] as? [String: Any])?["reason"] as? String ?? ""
        #expect(reason.hasPrefix(noManager), "\(reason)")
        #expect(reason.contains("tried "), "names where it looked: \(reason)")
        #expect(reason.contains("unix:path="), "\(reason)")

        // A subscriber joining the same watch hears it too, at once — not "not connected yet".
        let joiner = try await eventbus(["tail", "--socket", socket, "--units", "*", "--count", "1"], in: directory)
        #expect(joiner.status == 0, "\(joiner.stderr)")
        #expect(joiner.stdout.contains(noManager), "\(joiner.stdout)")

        // status shows the source and why it sees nothing.
        let status = try await eventbus(["status", "--socket", socket], in: directory)
        #expect(status.stdout.contains("units:match=* manager=system"), "\(status.stdout)")
        #expect(status.stdout.contains("unavailable: \(noManager)"), "\(status.stdout)")

        kill(first.process.processIdentifier, SIGKILL)  // it would follow for ever
        _ = await first.finish()
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
        // The gap the joiner alone was given does not hold the shutdown up to its deadline.
        #expect(!daemon.output.contains("had not delivered up to event"), "\(daemon.output)")
    }
}
