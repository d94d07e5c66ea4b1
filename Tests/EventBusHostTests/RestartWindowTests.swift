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

    /// The crashing fixture with the longest restart delay: the test's posts, made the moment
    /// the crash is logged (``WhenLogged``), land in it.
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
    /// (Runs on a ``WhenLogged`` thread: it throws rather than records.)
    func postNumbered(_ count: Int, _ directory: TemporaryDirectory) throws -> [Int64] {
        let (connection, _) = try rawConnection(isolation.socket(directory))
        var bytes: [UInt8] = []
        for n in 1...count { bytes += JSONWriter.line(["op": "post", "name": "test.n", "fields": ["n": .int(Int64(n))]]) }
        try connection.send(bytes)
        return try (1...count).map { _ in
            guard let sequence = try connection.readJSON()?["seq"]?.intValue else { throw POSIXError(.EPROTO) }
            return sequence
        }
    }

    /// What the host logs when a worker has crashed and its mailbox is held.
    static let crashLogged = "module worker crashed"

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
        let posting = WhenLogged(daemon, Self.crashLogged) { try postNumbered(300, directory) }
        let crash = try await crash(directory)
        #expect(crash["restarting"] == .bool(true), "\(crash)")
        #expect((crash["lost"]?.intValue ?? 0) >= 1, "the event it died on: \(crash)")
        _ = try await posting.value()
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
        let posting = WhenLogged(daemon, Self.crashLogged) { try postNumbered(300, directory) }
        _ = try await crash(directory)
        let sequences = try await posting.value()
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
        let posting = WhenLogged(daemon, Self.crashLogged) { try postNumbered(50, directory) }
        _ = try await crash(directory, tailing: 2)
        _ = try await posting.value()

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
        let daemon = try await daemon(directory)
        let posting = WhenLogged(daemon, Self.crashLogged) {
            _ = try postNumbered(50, directory)
            daemon.signal(SIGTERM)
        }
        _ = try await crash(directory)
        try await posting.value()
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
        let socket = isolation.socket(directory), changed = config("test.b.>")
        let reloading = WhenLogged(daemon, Self.crashLogged) {
            try post(socket, "test.a.x", 1...20)
            try post(socket, "test.b.x", 1...20)
            try directory.write("eventbus.yaml", changed)
            daemon.signal(SIGHUP)
        }
        #expect(kill(pid_t(pid), SIGKILL) == 0)
        try await reloading.value()
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

/// Runs `work` on a thread of its own as soon as the host's log contains `text`.
///
/// Why not on the test's task: on a loaded runner that task can wait longer than the longest
/// restart delay (30 s) for a thread of Swift's cooperative pool — seen in CI: 70 s between a
/// crash and the test's next step — and the events meant for the delay came after it. A thread
/// of its own, polling the log every 5 ms, is scheduled by the kernel like the host's.
final class WhenLogged<Value: Sendable>: @unchecked Sendable {
    private let done = DispatchSemaphore(value: 0)
    /// Set by the thread before it signals `done`; read after.
    private var outcome: Result<Value, any Error>?

    init(_ daemon: DaemonProcessTests.Daemon, _ text: String, _ work: @escaping @Sendable () throws -> Value) {
        Thread { [self] in
            let deadline = Date().addingTimeInterval(300)  // a bound for broken tests only
            while !daemon.output.contains(text), Date() < deadline { usleep(5_000) }
            outcome = Result { try work() }
            done.signal()
        }.start()
    }

    /// The work's result, once it has run; its error, if it threw.
    func value() async throws -> Value {
        await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async { [done] in
                done.wait()
                finished.resume()
            }
        }
        return try outcome!.get()
    }
}
