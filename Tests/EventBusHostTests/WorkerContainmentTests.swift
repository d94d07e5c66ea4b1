import ControlProtocol
import Foundation
import Testing

/// A module's whole process tree lives and dies with its worker, and a worker's end is reported
/// as what it was: seen from the process even when its children hold its socket, with the limit
/// that ended it, and with what it took along at a shutdown.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct WorkerContainmentTests {
    typealias Daemon = DaemonProcessTests.Daemon

    private func start(_ directory: TemporaryDirectory, module: String, worker: String = "", rest: String = "") async throws -> Daemon {
        try await Daemon.running("""
            control: {socket: \(directory.path)/control.sock}
            \(rest)
            modules:
              m:
                path: \(BuildProducts.fixture(module))
                \(worker.isEmpty ? "" : "worker: {\(worker)}")
            """, in: directory)
    }

    private func socket(_ directory: TemporaryDirectory) -> String { directory.path + "/control.sock" }

    /// Starts `forks` forked and `spawns` spawned children in the module and returns their pids.
    private func children(forks: Int, spawns: Int, _ directory: TemporaryDirectory) async throws -> [pid_t] {
        let results = try CLIProcess(["tail", "--socket", socket(directory), "--json", "--count", "1", "result.children"], in: directory)
        #expect(await waitForTailing(socket(directory), count: 1))
        _ = try ask(socket(directory), ["op": "post", "name": "test.children", "fields": ["forks": .int(Int64(forks)), "spawns": .int(Int64(spawns))]])
        let pids = await results.finish().jsonLines.first?["fields"]?["pids"]?.stringValue ?? ""
        return pids.split(separator: ",").compactMap { pid_t($0) }
    }

    private func alive(_ pid: pid_t) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return false }
        return stat.split(separator: ")").last?.split(separator: " ").first != "Z"
    }

    @Test func whatAModuleStartsEndsWithItsWorkerAtACrashAndAtAStop() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await start(directory, module: "FixtureCrashing")
        let first = try await children(forks: 5, spawns: 5, directory)
        #expect(first.count == 10)
        #expect(first.allSatisfy(alive))

        let crashes = try CLIProcess(["tail", "--socket", socket(directory), "--json", "--count", "1", "module.crashed"], in: directory)
        #expect(await waitForTailing(socket(directory), count: 1))
        _ = try ask(socket(directory), ["op": "post", "name": "test.crash"])
        #expect(await crashes.finish().status == 0)
        #expect(await eventually { !first.contains(where: alive) }, "children of the crashed worker: \(first.filter(alive))")

        #expect(await eventually { (try? ask(socket(directory), ["op": "modules"]))?["modules"]?.arrayValue?.first?["state"]?.stringValue == "active" })
        let second = try await children(forks: 3, spawns: 3, directory)
        #expect(second.count == 6)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
        #expect(await eventually { !second.contains(where: alive) }, "children at the host's stop: \(second.filter(alive))")
    }

    /// Forked children hold the worker's socket open: the crash must still be seen when the
    /// worker dies, not when the heartbeat runs out, and called what it was.
    @Test func aCrashAfterForkIsSeenFromTheProcessAndNamedForItsSignal() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await start(directory, module: "FixtureCrashing", worker: "heartbeat_timeout: 120s")
        defer { withExtendedLifetime(daemon) {} }
        #expect(try await children(forks: 4, spawns: 0, directory).count == 4)
        let crashes = try CLIProcess(["tail", "--socket", socket(directory), "--json", "--count", "1", "module.crashed"], in: directory)
        #expect(await waitForTailing(socket(directory), count: 1))
        _ = try ask(socket(directory), ["op": "post", "name": "test.crash"])
        let crash = await crashes.finish().jsonLines.first
        let reason = crash?["fields"]?["reason"]?.stringValue ?? ""
        #expect(reason.contains("killed by signal"), "\(reason)")
        #expect(!reason.contains("heartbeat"), "\(reason)")
    }

    @Test func aWorkerPastItsCPULimitIsReportedAsSuch() async throws {
        let directory = try TemporaryDirectory()
        // A second of CPU can take long on a loaded machine: the heartbeat limit stays out of it.
        let daemon = try await start(directory, module: "FixtureCrashing", worker: "cpu_limit: 1s, heartbeat_timeout: 600s")
        defer { withExtendedLifetime(daemon) {} }
        let crashes = try CLIProcess(["tail", "--socket", socket(directory), "--json", "--count", "1", "module.crashed"], in: directory)
        #expect(await waitForTailing(socket(directory), count: 1))
        _ = try ask(socket(directory), ["op": "post", "name": "test.burn"])
        let crash = await crashes.finish().jsonLines.first
        #expect(crash?["fields"]?["signal"]?.intValue == Int64(SIGXCPU), "\(String(describing: crash))")
        #expect(crash?["fields"]?["reason"]?.stringValue?.contains("used up its CPU limit (cpu_limit 1s)") == true, "\(String(describing: crash))")
    }

    /// A stalled module in its worker at shutdown: what the worker held is counted as lost in
    /// the log, and before that `modules` shows it as queued, not delivered.
    @Test func eventsAStalledWorkerHeldAtShutdownAreReportedLost() async throws {
        let directory = try TemporaryDirectory()
        // Never killed as hung while the test waits, however loaded the machine: the stall
        // must still be there at the shutdown.
        let daemon = try await start(directory, module: "FixtureStalled", worker: "heartbeat_timeout: 600s", rest: "shutdown_timeout: 2s")
        for _ in 0..<50 { _ = try ask(socket(directory), ["op": "post", "name": "test.load"]) }
        func module() -> JSON? { (try? ask(socket(directory), ["op": "modules"]))?["modules"]?.arrayValue?.first }
        #expect(await eventually { (module()?["queued"]?.intValue ?? 0) + (module()?["delivered"]?.intValue ?? 0) == 50 })
        #expect((module()?["delivered"]?.intValue ?? 99) <= 1, "forwarded is not handled: \(String(describing: module()))")
        daemon.signal(SIGTERM)
        _ = await daemon.exitStatus()
        #expect(daemon.output.contains("event(s) the module had not handled are lost"), "\(daemon.output)")
    }
}
