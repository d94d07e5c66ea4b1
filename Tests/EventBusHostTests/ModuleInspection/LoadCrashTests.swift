import ControlProtocol
import EventBusHost
import Foundation
import Testing

/// Modules whose *load* crashes or hangs (an ELF constructor that faults, exits or never
/// returns: code `dlopen` runs, which the preflight cannot judge), with the real eventbusd and
/// real worker processes. `--check-config` loads each module in a check worker, so it names the
/// module and how its load ended, checks the rest and exits 1 — before, the first such module
/// killed it with SIGSEGV and no report. A host starting with one in `isolation: process` runs
/// without it and says why.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct LoadCrashTests {
    typealias Daemon = DaemonProcessTests.Daemon

    @Test func checkConfigNamesEveryModuleWhoseLoadCrashesAndChecksTheOthers() async throws {
        let directory = try TemporaryDirectory()
        let crashing = try await UnsafeModules.crashingOnLoad(in: directory)
        let exiting = try await UnsafeModules.constructing("_exit(3);", name: "exitonload", in: directory)
        let config = try directory.write("check.yaml", """
            modules:
              crashing:
                path: \(crashing)
              hello:
                path: \(BuildProducts.fixture("Hello"))
                config: {greeting: hi}
              inhost:
                path: \(crashing)
                isolation: none
              exiting:
                path: \(exiting)
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
            """)
        let check = try Daemon(arguments: ["--check-config", "--config", config], in: directory)
        #expect(await check.exitStatus() == 1, "\(check.output)")
        let output = check.output
        #expect(output.contains("module crashing: \(config):3: crashed while loading \(crashing): killed by signal 11 (SIGSEGV)\n"),
                "\(output)")
        // Checked in a worker too: in eventbusd the same load ends the host, which the line says.
        #expect(output.contains("module inhost: \(config):8: crashed while loading \(crashing): killed by signal 11 (SIGSEGV); with isolation: none it takes eventbusd down at start"),
                "\(output)")
        #expect(output.contains("module exiting: \(config):11: crashed while loading \(exiting): exited with status 3"), "\(output)")
        // The modules after each crash are still checked.
        #expect(output.contains("module hello: loads, ABI ok, config ok ("), "\(output)")
        #expect(output.contains("module counter: loads, ABI ok"), "\(output)")
        #expect(output.contains("3 problem(s) found"), "\(output)")
    }

    @Test func checkConfigKillsAModuleWhoseLoadHangsAndGoesOn() async throws {
        let directory = try TemporaryDirectory()
        let hanging = try await UnsafeModules.hangingOnLoad(in: directory)
        let config = try directory.write("check.yaml", """
            modules:
              hanging:
                path: \(hanging)
              hello:
                path: \(BuildProducts.fixture("Hello"))
            """)
        let start = ContinuousClock.now
        // The timeout is hello's too: 20 s, not 2, so that a loaded machine's slow start of its
        // check process is not taken for a hang.
        let check = try Daemon(arguments: ["--check-config", "--config", config, "--check-timeout", "20"], in: directory)
        #expect(await check.exitStatus() == 1, "\(check.output)")
        // It waited out the timeout; that it did not wait for the hanging load beyond it is what
        // the output says (the check process killed), not a wall-clock bound: a loaded runner
        // took 79 s to get this far.
        #expect(ContinuousClock.now - start >= .seconds(20))
        let output = check.output
        #expect(output.contains("module hanging: \(config):3: did not finish loading \(hanging) within 20.0 seconds; its check process was killed"),
                "\(output)")
        #expect(output.contains("module hello: loads, ABI ok, config ok ("), "\(output)")
        #expect(output.contains("1 problem(s) found"), "\(output)")
    }

    /// What the supervisor does with a worker that dies before it answers the start: the module
    /// is refused with the worker's exit (not "activate did not return"), and the host serves
    /// the CLI and delivers to the other modules.
    @Test func aHostStartedWithAModuleWhoseLoadCrashesItsWorkerRunsAndReportsIt() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let crashing = try await UnsafeModules.crashingOnLoad(in: directory)
        let daemon = try await Daemon.running("""
            control: {socket: \(socket)}
            modules:
              crashing:
                path: \(crashing)
                isolation: process
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
                config: {pattern: "user.>"}
            """, in: directory)
        let reason = "the worker ended while loading or activating the module: killed by signal 11 (SIGSEGV)"
        #expect(daemon.output.contains("module crashing refused: \(reason)"), "\(daemon.output)")

        let status = try await eventbus(["status", "--socket", socket], in: directory)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("crashing"), "\(status.stdout)")
        let listed = try await eventbus(["modules", "--socket", socket, "--json"], in: directory)
        #expect(listed.status == 0, "\(listed.stderr)")
        let modules = try JSON.parse(listed.stdout)["modules"]?.arrayValue ?? []
        let refused = modules.first { $0["name"] == "crashing" }
        #expect(refused?["state"] == "failed", "\(listed.stdout)")
        #expect(refused?["reason"]?.stringValue == reason, "\(listed.stdout)")
        #expect(modules.first { $0["name"] == "counter" }?["state"] == "active", "\(listed.stdout)")

        try postMany(socket, name: "user.after", count: 3)
        #expect(await eventually {
            let counter = (try? ask(socket, ["op": "modules"]))?["modules"]?.arrayValue?.first { $0["name"] == "counter" }
            return counter?["delivered"]?.intValue == 3
        }, "\(daemon.output)")
        #expect(daemon.process.isRunning)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }
}
