import EventBusHost
import Foundation
import Testing

/// The real eventbusd as a child process: starts, reloads on SIGHUP, exits 0 on SIGTERM.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct DaemonProcessTests {
    /// A running eventbusd whose output (stdout and stderr) the test reads.
    ///
    /// The output goes to a file, not a pipe: a pipe's end of file can be held back by another
    /// child that inherited its write end, while a file holds everything written once the
    /// process has exited.
    final class Daemon: @unchecked Sendable {
        let process = Process()
        private let logPath: String

        /// `openFiles`: soft and hard `RLIMIT_NOFILE` of the daemon (set by `prlimit`, which
        /// then execs it, so the pid is eventbusd's).
        /// `wrapper` runs eventbusd through another command (`ip netns exec NAME`).
        init(arguments: [String], openFiles: Int? = nil, wrapper: [String] = [], in directory: TemporaryDirectory) throws {
            logPath = try directory.write("eventbusd-\(UUID().uuidString).log", "")
            let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
            if !wrapper.isEmpty {
                process.executableURL = URL(fileURLWithPath: wrapper[0])
                process.arguments = Array(wrapper.dropFirst()) + [BuildProducts.eventbusd] + arguments
            } else if let openFiles {
                process.executableURL = URL(fileURLWithPath: "/usr/bin/prlimit")
                process.arguments = ["--nofile=\(openFiles):\(openFiles)", "--", BuildProducts.eventbusd] + arguments
            } else {
                process.executableURL = URL(fileURLWithPath: BuildProducts.eventbusd)
                process.arguments = arguments
            }
            process.standardError = log
            process.standardOutput = log
            try process.run()
            try log.close()
        }

        var output: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

        func waitFor(_ text: String, timeout: Duration = patience) async -> Bool {
            await eventually(timeout: timeout) { output.contains(text) }
        }

        func signal(_ signal: Int32) {
            kill(process.processIdentifier, signal)
        }

        /// The exit status, once it has exited (nil if it did not within the bound).
        func exitStatus() async -> Int32? {
            guard await eventually({ !process.isRunning }) else { return nil }
            return process.terminationStatus
        }

        deinit {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        }
    }

    @Test func startsReloadsOnSIGHUPAndExitsCleanlyOnSIGTERM() async throws {
        let directory = try TemporaryDirectory()
        let counter = BuildProducts.fixture("FixtureCounter")
        let first = """
            shutdown_timeout: 20s
            control: {socket: \(directory.path)/control.sock}
            sources:
              timers:
                - {name: fast, every: 100ms}
            modules:
              counter:
                path: \(counter)
                config: {pattern: timer.tick}
            """
        let config = try directory.write("eventbus.yaml", first)
        let daemon = try Daemon(arguments: ["--config", config], in: directory)

        #expect(await daemon.waitFor("ready; SIGHUP reloads"), "\(daemon.output)")
        #expect(await daemon.waitFor("module counter active (fixture-counter 1.0.0"))
        // The host's timer ticks reach the module.
        #expect(await daemon.waitFor("module=counter [EventBusHost] first event timer.tick"), "\(daemon.output)")

        try directory.write("eventbus.yaml", first + """

              second:
                path: \(counter)
                config: {pattern: timer.tick, id: second}
            """)
        daemon.signal(SIGHUP)
        #expect(await daemon.waitFor("module second active"), "\(daemon.output)")
        #expect(await daemon.waitFor("module=second [EventBusHost] first event timer.tick"))

        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
        let output = daemon.output
        #expect(output.contains("module counter deactivated (shutting down)"))
        #expect(output.contains("module second deactivated (shutting down)"))
        #expect(output.contains("eventbusd stopped"))
        #expect(!output.contains("not clean"))
    }

    @Test func checkConfigReportsEveryModuleAndFailsOnProblems() async throws {
        let directory = try TemporaryDirectory()
        let good = try directory.write("good.yaml", """
            modules:
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
              off:
                path: nowhere.so
                enabled: false
            """)
        let ok = try Daemon(arguments: ["--check-config", "--config", good], in: directory)
        #expect(await ok.exitStatus() == 0, "\(ok.output)")
        #expect(ok.output.contains("module counter: loads, ABI ok"))
        #expect(ok.output.contains("module off: disabled"))

        let bad = try directory.write("bad.yaml", """
            modules:
              mismatch:
                path: \(BuildProducts.fixture("FixtureABIMismatch"))
            """)
        let failing = try Daemon(arguments: ["--check-config", "--config", bad], in: directory)
        #expect(await failing.exitStatus() == 1, "\(failing.output)")
        #expect(failing.output.contains("module mismatch: \(bad):3: cannot load module"))
        #expect(failing.output.contains("ABI mismatch"))
        #expect(failing.output.contains("1 problem(s) found"))
    }

    /// A mistake outside the modules — a misspelt top-level key, a bad value in another
    /// section — is reported with the modules' own checks, not instead of them.
    @Test func checkConfigChecksTheModulesDespiteProblemsElsewhere() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("eventbus.yaml", """
            shutdown_timout: 5s
            control:
              replay_events: -3
            modules:
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
              mismatch:
                path: \(BuildProducts.fixture("FixtureABIMismatch"))
            """)
        let check = try Daemon(arguments: ["--check-config", "--config", config], in: directory)
        #expect(await check.exitStatus() == 1, "\(check.output)")
        let output = check.output
        #expect(output.contains("\(config):1: shutdown_timout: unknown key (did you mean shutdown_timeout?)"), "\(output)")
        #expect(output.contains("control.replay_events"), "\(output)")
        #expect(output.contains("module counter: loads, ABI ok"), "\(output)")
        #expect(output.contains("module mismatch: \(config):8: cannot load module"), "\(output)")
        #expect(output.contains("3 problem(s) found"), "\(output)")
        // At start the same file stops the host, naming both problems.
        let start = try Daemon(arguments: ["--config", config], in: directory)
        #expect(await start.exitStatus() != 0)
        #expect(start.output.contains("shutdown_timout") && start.output.contains("control.replay_events"), "\(start.output)")
    }

    @Test func aBadConfigAtStartExitsNonZeroNamingTheLine() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("eventbus.yaml", "modules:\n  hello:\n    path: 12\n")
        let daemon = try Daemon(arguments: ["--config", config], in: directory)
        #expect(await daemon.exitStatus() == 1, "\(daemon.output)")
        #expect(daemon.output.contains("cannot start: \(config):3: modules.hello.path: expected a string, found 12"))
    }
}
