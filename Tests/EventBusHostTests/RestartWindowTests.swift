import ControlProtocol
import EventBusHost
import Foundation
import Testing

/// What happens to a process-isolated module's events while its crashed worker waits for its
/// restart, with the real eventbusd, real worker processes and a fixture that crashes for real:
/// they wait in its mailbox and reach the restarted worker once and in order; past the mailbox's
/// bounds they are announced as a gap with exact counts; if the module gives up or is stopped
/// meanwhile, they are counted as lost.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct RestartWindowTests {
    typealias Daemon = DaemonProcessTests.Daemon
    let isolation = IsolationTests()

    /// The crashing fixture with a restart delay far longer than the test's posts take, even on
    /// a machine so loaded that the test's task waits seconds for a thread (they go over one
    /// connection).
    func daemon(_ directory: TemporaryDirectory, path: String = BuildProducts.fixture("FixtureCrashing"),
                extra: String = "", worker: String = "restart_delay: 30s") async throws -> Daemon {
        try await Daemon.running(isolation.config(directory, modules: """
              crashing:
                path: \(path)
                isolation: process
                worker: {\(worker)}\(extra)
            """), in: directory)
    }

    /// Posts `test.crash` and returns the `module.crashed` fields once it is announced.
    func crash(_ directory: TemporaryDirectory, tailing: Int = 1) async throws -> JSON {
        let crashes = try await isolation.tail(["module.crashed"], count: 1, directory, tailing: tailing)
        _ = try ask(isolation.socket(directory), ["op": "post", "name": "test.crash"])
        let crash = try #require(await crashes.finish().jsonLines.first { $0["type"]?.stringValue == "event" })
        return try #require(crash["fields"])
    }

    /// Posts `test.n` events numbered 1…count over one connection; returns their sequence numbers.
    func postNumbered(_ count: Int, _ directory: TemporaryDirectory) throws -> [Int64] {
        let (connection, _) = try rawConnection(isolation.socket(directory))
        var bytes: [UInt8] = []
        for n in 1...count { bytes += JSONWriter.line(["op": "post", "name": "test.n", "fields": ["n": .int(Int64(n))]]) }
        try connection.send(bytes)
        return try (1...count).map { _ in
            let answer = try connection.readJSON() ?? .null
            return try #require(answer["seq"]?.intValue, "\(answer)")
        }
    }

    /// The fixture's report of what its current instance saw.
    func report(_ directory: TemporaryDirectory) async throws -> JSON {
        let results = try await isolation.tail(["result.crashing"], count: 1, directory)
        _ = try ask(isolation.socket(directory), ["op": "post", "name": "test.report"])
        let report = try #require(await results.finish().jsonLines.first { $0["type"]?.stringValue == "event" })
        return try #require(report["fields"])
    }

    @Test func eventsPostedWhileTheWorkerWaitsForItsRestartReachItOnceAndInOrder() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await daemon(directory)
        let crash = try await crash(directory)
        #expect(crash["restarting"] == .bool(true), "\(crash)")
        #expect((crash["lost"]?.intValue ?? 0) >= 1, "the event it died on: \(crash)")
        _ = try postNumbered(300, directory)
        #expect(isolation.module("crashing", directory)?["state"]?.stringValue != "failed")

        // All 300 were posted before the restart (30 s after the crash), and held for it.
        #expect(await daemon.waitFor("module restarted (fixture-crashing 1.0.0", timeout: .seconds(240)), "\(daemon.output)")
        #expect(daemon.output.contains("300 event(s) held for it meanwhile follow"), "\(daemon.output)")
        let seen = try await report(directory)
        #expect(seen["numbered"]?.intValue == 300, "\(seen)")
        #expect(seen["first_n"]?.intValue == 1 && seen["last_n"]?.intValue == 300, "\(seen)")
        #expect(seen["disorder"]?.intValue == 0 && seen["skips"]?.intValue == 0, "\(seen)")
        #expect(seen["gaps"]?.intValue == 0, "\(seen)")
        // The event it crashed on was not delivered again: one crash, one restart.
        let state = try #require(isolation.module("crashing", directory))
        #expect(state["restarts"]?.intValue == 1 && state["state"]?.stringValue == "active", "\(state)")
        #expect(state["dropped"]?.intValue == 0, "\(state)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func pastTheMailboxBoundsTheEventsHeldAreAnnouncedAsAGapWithExactCounts() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await daemon(directory, extra: "\n    mailbox_capacity: 100")
        _ = try await crash(directory)
        let sequences = try postNumbered(300, directory)
        #expect(await daemon.waitFor("module restarted (fixture-crashing 1.0.0", timeout: .seconds(240)), "\(daemon.output)")
        #expect(daemon.output.contains("100 event(s) held for it meanwhile follow"), "\(daemon.output)")

        let seen = try await report(directory)
        #expect(seen["numbered"]?.intValue == 100, "\(seen)")
        #expect(seen["first_n"]?.intValue == 1 && seen["last_n"]?.intValue == 100, "\(seen)")
        #expect(seen["disorder"]?.intValue == 0 && seen["skips"]?.intValue == 0, "\(seen)")
        #expect(seen["gaps"]?.intValue == 1, "\(seen)")
        #expect(seen["gap_dropped"]?.intValue == 200, "\(seen)")
        #expect(seen["gap_first"]?.intValue == sequences[100] && seen["gap_last"]?.intValue == sequences[299], "\(seen) \(sequences)")
        let state = try #require(isolation.module("crashing", directory))
        #expect(state["dropped"]?.intValue == 200, "\(state)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// Its restart cannot load the module (the file is gone): it gives up, and what waited for
    /// it is counted in `module.failed`.
    @Test func aModuleThatFailsForGoodCountsTheEventsHeldForItAsLost() async throws {
        let directory = try TemporaryDirectory()
        let copy = directory.path + "/libcrashing.so"
        try FileManager.default.copyItem(atPath: BuildProducts.fixture("FixtureCrashing"), toPath: copy)
        let daemon = try await daemon(directory, path: copy, worker: "restart_delay: 30s, start_limit_burst: 1, start_limit_interval: 10m")
        let failures = try await isolation.tail(["module.failed"], count: 1, directory)
        try FileManager.default.removeItem(atPath: copy)  // the running worker has it loaded
        _ = try await crash(directory, tailing: 2)
        _ = try postNumbered(50, directory)

        let failed = try #require(await failures.finish(timeout: .seconds(240)).jsonLines.first { $0["type"]?.stringValue == "event" },
                                  "\(daemon.output)")
        #expect(failed["fields"]?["module"]?.stringValue == "crashing")
        #expect(failed["fields"]?["lost"]?.intValue == 50, "\(failed) \(daemon.output)")
        #expect(daemon.output.contains("the 50 event(s) held for it are lost"), "\(daemon.output)")
        #expect(isolation.module("crashing", directory)?["state"]?.stringValue == "failed")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func aStopDuringTheRestartDelayCountsTheEventsHeldAsLost() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await daemon(directory, worker: "restart_delay: 30s")
        _ = try await crash(directory)
        _ = try postNumbered(50, directory)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
        // Nothing to wait for: no worker runs (not a drain that lasts the shutdown budget).
        #expect(!daemon.output.contains("did not drain"), "\(daemon.output)")
        #expect(!daemon.output.contains("not clean"), "\(daemon.output)")
        #expect(daemon.output.contains("module stopped while waiting for its restart: 50 event(s) held for it are lost"),
                "\(daemon.output)")
    }

    /// The restarted worker subscribes for another pattern (its section changed during the
    /// delay): the old subscription is not adopted, what it held is discarded and counted, and
    /// the new one starts when it is made.
    @Test func aReloadThatChangesTheSubscriptionsDuringTheDelayDiscardsWhatTheOldOnesHeldAndSaysSo() async throws {
        let directory = try TemporaryDirectory()
        func config(_ pattern: String) -> String {
            isolation.config(directory, modules: """
                  counter:
                    path: \(BuildProducts.fixture("FixtureCounter"))
                    worker: {restart_delay: 30s}
                    config: {pattern: "\(pattern)"}
                """)
        }
        let daemon = try await Daemon.running(config("test.a.>"), in: directory)
        let pid = try #require(isolation.module("counter", directory)?["pid"]?.intValue)
        let crashes = try await isolation.tail(["module.crashed"], count: 1, directory)
        #expect(kill(pid_t(pid), SIGKILL) == 0)
        #expect(await crashes.finish().jsonLines.contains { $0["type"]?.stringValue == "event" })
        try post(isolation.socket(directory), "test.a.x", 1...20)
        try post(isolation.socket(directory), "test.b.x", 1...20)
        try directory.write("eventbus.yaml", config("test.b.>"))
        daemon.signal(SIGHUP)
        #expect(await daemon.waitFor("module restarted (fixture-counter 1.0.0", timeout: .seconds(240)), "\(daemon.output)")
        #expect(await daemon.waitFor("20 event(s) held for 1 subscription(s) the restarted module did not make again were discarded", timeout: .seconds(240)),
                "\(daemon.output)")

        _ = try ask(isolation.socket(directory), ["op": "post", "name": "test.b.x"])
        let results = try await isolation.tail(["result.counter.counter"], count: 1, directory)
        _ = try ask(isolation.socket(directory), ["op": "post", "name": "test.report"])
        let report = await results.finish().jsonLines.first { $0["type"]?.stringValue == "event" }
        #expect(report?["fields"]?["count"]?.intValue == 1, "only what came after its new subscription: \(String(describing: report))")
        #expect(report?["fields"]?["gaps"]?.intValue == 0, "\(String(describing: report))")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }
}
