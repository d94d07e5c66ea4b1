import ControlProtocol
import EventBusHost
import Foundation
import ModuleIsolation
import Testing

/// `isolation: process` with the real eventbusd and real worker processes: a module that
/// crashes or hangs takes down only its worker, which is restarted; `module.crashed` says so;
/// other modules see every event; the start limit ends the restarts; workers die with the host.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct IsolationTests {
    typealias Daemon = DaemonProcessTests.Daemon

    /// A host with a control socket, a timer-free config and the given modules section.
    func config(_ directory: TemporaryDirectory, modules: String) -> String {
        """
        control: {socket: \(directory.path)/control.sock}
        modules:
        \(modules)
        """
    }

    func socket(_ directory: TemporaryDirectory) -> String { directory.path + "/control.sock" }

    /// The host's `modules` answer for `name`.
    func module(_ name: String, _ directory: TemporaryDirectory) -> JSON? {
        (try? ask(socket(directory), ["op": "modules"]))?["modules"]?.arrayValue?.first { $0["name"]?.stringValue == name }
    }

    /// Starts `eventbus tail PATTERNS --json --count N` and waits until the host has it subscribed.
    func tail(_ patterns: [String], count: Int, _ directory: TemporaryDirectory, tailing: Int = 1) async throws -> CLIProcess {
        let tail = try CLIProcess(["tail"] + patterns + ["--json", "--count", String(count), "--socket", socket(directory)],
                                  in: directory)
        #expect(await waitForTailing(socket(directory), count: tailing))
        return tail
    }

    @Test func aModuleThatCrashesIsRestartedWhileTheHostAndOtherModulesCarryOn() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              crashing:
                path: \(BuildProducts.fixture("FixtureCrashing"))
                isolation: process
                worker: {restart_delay: 50ms}
              plain:
                path: \(BuildProducts.fixture("FixtureCounter"))
                isolation: none
                config: {id: plain}
              isolated:
                path: \(BuildProducts.fixture("FixtureCounter"))
                isolation: process
                config: {id: isolated}
            """), in: directory)
        let firstPID = try #require(module("crashing", directory)?["pid"]?.intValue)
        let crashes = try await tail(["module.>"], count: 1, directory)

        try postMany(socket(directory), name: "test.ping", count: 300)
        _ = try ask(socket(directory), ["op": "post", "name": "test.crash"])
        try postMany(socket(directory), name: "test.ping", count: 300)

        // Announced by the host, seen through a real tail.
        let crash = try #require(await crashes.finish().jsonLines.first { $0["type"]?.stringValue == "event" })
        #expect(crash["name"]?.stringValue == "module.crashed", "\(crash)")
        let fields = try #require(crash["fields"])
        #expect(fields["module"]?.stringValue == "crashing")
        // fatalError is a trap (SIGILL); under the thread sanitizer's signal handling it ends as SIGSEGV.
        let signal = try #require(fields["signal"]?.intValue, "\(fields)")
        #expect(signal == Int64(SIGILL) || signal == Int64(SIGSEGV), "\(fields)")
        #expect((fields["lost"]?.intValue ?? 0) >= 1, "the event it crashed on is lost: \(fields)")
        #expect(fields["restarting"] == .bool(true))

        // Restarted: a new worker, one restart, the last crash named.
        #expect(await daemon.waitFor("module restarted (fixture-crashing 1.0.0"), "\(daemon.output)")
        let restarted = try #require(module("crashing", directory))
        #expect(restarted["state"]?.stringValue == "active")
        #expect(restarted["restarts"]?.intValue == 1)
        #expect(restarted["isolation"]?.stringValue == "process")
        #expect(restarted["last_crash"]?.stringValue?.hasPrefix("killed by signal \(signal) (SIG") == true, "\(restarted)")
        #expect(restarted["pid"]?.intValue != firstPID)
        // The crash is reported with the module's file and line, by a quick, non-interactive
        // backtracer (the thread sanitizer, when it runs, takes the signal instead).
        let sanitized = daemon.output.contains("ThreadSanitizer")
        #expect(sanitized || daemon.output.contains("crashed:"), "\(daemon.output)")
        let line = try #require(try String(contentsOfFile: BuildProducts.repository + "/Tests/Fixtures/FixtureCrashing/FixtureCrashing.swift",
                                           encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            .firstIndex { $0.contains(#"case "test.crash": fatalError"#) }) + 1
        #expect(sanitized || daemon.output.contains("in libFixtureCrashing.so at "), "\(daemon.output)")
        #expect(sanitized || daemon.output.contains("FixtureCrashing.swift:\(line)"), "\(daemon.output)")
        // Under memory pressure the kernel kills a worker before the host.
        if let pid = restarted["pid"]?.intValue {
            let score = try String(contentsOfFile: "/proc/\(pid)/oom_score_adj", encoding: .utf8)
            #expect(score.trimmingCharacters(in: .whitespacesAndNewlines) == "500")
        }
        if ProcessInfo.processInfo.environment["SWIFT_BACKTRACE"] == nil, let pid = restarted["pid"]?.intValue {
            let environment = try String(contentsOfFile: "/proc/\(pid)/environ", encoding: .utf8).split(separator: "\0")
            #expect(environment.contains(Substring(WorkerProcess.crashBacktrace)), "\(environment)")
        }

        // Both other modules got all 601 events; the restarted one works (its posts reach the host).
        let results = try await tail(["result.>"], count: 3, directory)
        _ = try ask(socket(directory), ["op": "post", "name": "test.report"])
        let reports = await results.finish().jsonLines.filter { $0["type"]?.stringValue == "event" }
        func count(_ name: String) -> Int64? {
            reports.first { $0["name"]?.stringValue == name }?["fields"]?["count"]?.intValue
        }
        #expect(count("result.counter.plain") == 601, "\(reports)")
        #expect(count("result.counter.isolated") == 601, "\(reports)")
        // A fresh instance: of the 300 pings after the crash, it got those not yet sent to the
        // crashed worker (the rest are in `lost`, with the event it died on), none twice.
        let lost = fields["lost"]?.intValue ?? 0
        let afterCrash = count("result.crashing") ?? -1
        #expect(afterCrash <= 300 && afterCrash + lost - 1 >= 300, "lost \(lost): \(reports)")

        // The worker's log lines reach the host's log under the module's name.
        #expect(daemon.output.contains("module=isolated [EventBusHost] first event test.ping"), "\(daemon.output)")
        #expect(daemon.process.isRunning)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// A stalled worker's module holds at most its mailbox's bytes, not its event count: the
    /// rest is dropped and counted (``WorkerMailboxBoundTests`` has the exact counts).
    @Test func aStalledWorkerTakesAtMostItsMailboxBytes() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              stalled:
                path: \(BuildProducts.fixture("FixtureStalled"))
                isolation: process
                mailbox_bytes: 1MiB
                worker: {heartbeat_timeout: 60s}
            """), in: directory)
        _ = try ask(socket(directory), ["op": "post", "name": "test.first"])  // the module blocks on it
        let large = JSON.string(String(repeating: "x", count: 200_000))
        for index in 0..<100 {
            _ = try ask(socket(directory), ["op": "post", "name": "test.large", "fields": ["i": .int(Int64(index)), "p": large]])
        }
        // In all — the host's mailbox, on the way, in the worker — ≤ 1 MiB: five of 200 kB; the
        // rest is dropped.
        #expect(await eventually { (module("stalled", directory)?["dropped"]?.intValue ?? 0) >= 50 },
                "\(String(describing: module("stalled", directory)))")
        let stalled = try #require(module("stalled", directory))
        #expect((stalled["queued_bytes"]?.intValue ?? .max) <= 1 << 20, "\(stalled)")
        daemon.signal(SIGKILL)
        _ = await daemon.exitStatus()
    }

    @Test func aHungModuleIsKilledForMissingHeartbeatsAndRestarted() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              hanging:
                path: \(BuildProducts.fixture("FixtureHanging"))
                worker: {heartbeat_timeout: 3s, restart_delay: 50ms}
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
            """), in: directory)
        let crashes = try await tail(["module.crashed"], count: 1, directory)
        _ = try ask(socket(directory), ["op": "post", "name": "test.hang"])
        try postMany(socket(directory), name: "test.ping", count: 200)

        let crash = try #require(await crashes.finish().jsonLines.first { $0["type"]?.stringValue == "event" })
        let fields = try #require(crash["fields"])
        #expect(fields["module"]?.stringValue == "hanging")
        #expect(fields["signal"]?.intValue == Int64(SIGKILL), "\(fields)")
        #expect(fields["reason"]?.stringValue?.contains("no heartbeat within") == true, "\(fields)")
        #expect(await daemon.waitFor("module restarted (fixture-hanging 1.0.0"), "\(daemon.output)")
        // At least one: on a machine loaded enough to starve an idle worker's heartbeat for the
        // whole timeout, the watchdog restarts it again, which is what it is for.
        #expect((module("hanging", directory)?["restarts"]?.intValue ?? 0) >= 1, "\(daemon.output)")

        let results = try await tail(["result.>"], count: 1, directory)
        _ = try ask(socket(directory), ["op": "post", "name": "test.report"])
        let report = await results.finish().jsonLines.first { $0["type"]?.stringValue == "event" }
        #expect(report?["fields"]?["count"]?.intValue == 201, "\(String(describing: report))")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func theStartLimitMarksTheModuleFailedAndAReloadStartsItAgain() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              crashing:
                path: \(BuildProducts.fixture("FixtureCrashing"))
                worker: {restart_delay: 50ms, start_limit_burst: 1, start_limit_interval: 10m}
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
            """), in: directory)
        let failures = try await tail(["module.failed"], count: 1, directory)
        _ = try ask(socket(directory), ["op": "post", "name": "test.crash"])
        #expect(await daemon.waitFor("module restarted (fixture-crashing"), "\(daemon.output)")
        _ = try ask(socket(directory), ["op": "post", "name": "test.crash"])

        let failed = try #require(await failures.finish().jsonLines.first { $0["type"]?.stringValue == "event" }, "\(daemon.output)")
        #expect(failed["fields"]?["module"]?.stringValue == "crashing")
        let state = try #require(module("crashing", directory))
        #expect(state["state"]?.stringValue == "failed", "\(state)")
        #expect(state["reason"]?.stringValue?.contains("start limit reached") == true, "\(state)")
        #expect(state["restarts"]?.intValue == 1)

        // The host and the other module are fine.
        let results = try await tail(["result.>"], count: 1, directory)
        _ = try ask(socket(directory), ["op": "post", "name": "test.report"])
        let report = await results.finish().jsonLines.first { $0["type"]?.stringValue == "event" }
        #expect(report?["fields"]?["count"]?.intValue == 2, "both crash events reached the counter: \(String(describing: report))")

        // A reload retries a failed module, as it does for any refused one.
        daemon.signal(SIGHUP)
        #expect(await eventually { module("crashing", directory)?["state"]?.stringValue == "active" })
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// What `systemctl stop` (KillMode=control-group), Ctrl-C in a terminal or `timeout` do:
    /// the signal reaches every process of the host's group at once. The worker ignores it, and
    /// the module is deactivated by its host, not killed under it.
    @Test func aStopSignalToTheWholeGroupLeavesTheModuleToItsHost() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
            """), in: directory)
        let pid = try #require(module("counter", directory)?["pid"]?.intValue).map { pid_t($0) }!
        for signal in [SIGINT, SIGHUP, SIGTERM] { #expect(kill(pid, signal) == 0) }
        try await Task.sleep(for: .milliseconds(300))
        #expect(module("counter", directory)?["pid"]?.intValue == Int64(pid), "the same worker, not a restarted one")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
        #expect(daemon.output.contains("module counter deactivated (shutting down)"), "\(daemon.output)")
        #expect(!daemon.output.contains("crashed"), "\(daemon.output)")
    }

    /// A fatal signal sent from outside (`kill -SEGV`, `kill -BUS`) is a crash like a fault: the
    /// Swift runtime's handler prints its report, and the worker must still end — not return to
    /// the interrupted code and run on — so the host announces it and restarts the module.
    @Test(arguments: [SIGSEGV, SIGBUS, SIGILL, SIGABRT])
    func aFatalSignalSentToAWorkerEndsItAndIsAnnounced(signal: Int32) async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
            """), in: directory)
        let pid = try #require(module("counter", directory)?["pid"]?.intValue).map { pid_t($0) }!
        let crashes = try await tail(["module.crashed"], count: 1, directory)
        #expect(kill(pid, signal) == 0)
        let crash = await crashes.finish().jsonLines.first
        // Under the thread sanitizer, its runtime takes the signal and ends the worker itself.
        let sanitized = daemon.output.contains("ThreadSanitizer")
        #expect(crash != nil && (sanitized || crash?["fields"]?["signal"]?.intValue == Int64(signal)), "\(daemon.output)")
        #expect(await eventually { module("counter", directory)?["state"]?.stringValue == "active" }, "restarted")
        #expect(module("counter", directory)?["pid"]?.intValue != Int64(pid), "a new worker")
        #expect(!daemon.output.contains("unable to locate swift-backtrace"), "\(daemon.output)")
    }

    /// A module that crashes in `deactivate`: its worker's end is reported as that (with the
    /// signal), not as a deactivation that overran the shutdown's budget.
    @Test func aWorkerThatCrashesWhileDeactivatingIsReportedAsEnded() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              crashing:
                path: \(BuildProducts.fixture("FixtureCrashing"))
            """), in: directory)
        _ = try ask(socket(directory), ["op": "post", "name": "test.crash-at-stop"])
        #expect(await eventually { module("crashing", directory)?["delivered"]?.intValue == 1 })
        daemon.signal(SIGTERM)
        _ = await daemon.exitStatus()
        #expect(daemon.output.contains("module crashing's worker ended before it finished deactivating: killed by signal"), "\(daemon.output)")
        #expect(!daemon.output.contains("did not finish deactivating within"), "\(daemon.output)")
    }

    @Test func aWorkerDiesWhenItsHostIsKilled() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
            """), in: directory)
        let pid = try #require(module("counter", directory)?["pid"]?.intValue).map { pid_t($0) }!
        #expect(kill(pid, 0) == 0)
        daemon.signal(SIGKILL)
        _ = await daemon.exitStatus()
        // Gone, or at most a zombie waiting for whoever inherited it to reap it.
        #expect(await eventually {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8) else { return true }
            return stat.split(separator: ")").last?.split(separator: " ").first == "Z"
        }, "worker \(pid) outlived its host")
    }

    @Test func aModuleInAWorkerWatchesFilesThroughTheHostsSharedSource() async throws {
        let directory = try TemporaryDirectory()
        let watched = directory.path + "/watched"
        try FileManager.default.createDirectory(atPath: watched, withIntermediateDirectories: true)
        let daemon = try await Daemon.running(config(directory, modules: """
              follower:
                path: \(BuildProducts.directory)/libFollower.so
                isolation: process
                config: {target: "file:\(watched)", field: path, contains: .conf, debounce_ms: 10}
            """), in: directory)
        // The host opened the files source the module asked for, in its own inotify instance.
        #expect(await eventually {
            let sources = (try? ask(socket(directory), ["op": "status"]))?["sources"]?.arrayValue ?? []
            return sources.contains { $0["id"]?.stringValue == "files:\(watched) recursive" }
        }, "\(daemon.output)")
        let matches = try await tail(["follower.match"], count: 1, directory)
        try Data("x".utf8).write(to: URL(fileURLWithPath: watched + "/app.conf"))
        let match = try #require(await matches.finish().jsonLines.first { $0["type"]?.stringValue == "event" })
        #expect(match["fields"]?["path"]?.stringValue == watched + "/app.conf", "\(match)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func aWorkerRunsUnderTheResourceLimitsOfItsConfig() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
                worker: {memory_limit: 1G, cpu_limit: 1h, open_files: 64}
            """), in: directory)
        // (Under the thread sanitizer the worker cannot start with 1G of RLIMIT_DATA: TSan maps
        // terabytes of shadow memory, and says so in this log.)
        let pid = try #require(module("counter", directory)?["pid"]?.intValue, "\(daemon.output)")
        // The kernel's word for the running worker's limits.
        let limits = try String(contentsOfFile: "/proc/\(pid)/limits", encoding: .utf8)
        func limit(_ name: String) -> [Substring] {
            let line = limits.split(separator: "\n").first { $0.hasPrefix(name) } ?? ""
            return line.dropFirst(name.count).split(separator: " ", omittingEmptySubsequences: true)
        }
        #expect(limit("Max data size").prefix(2) == ["1073741824", "1073741824"], "\(limits)")
        // The hard limit 5 s above: SIGXCPU first, SIGKILL only if the module ignores it.
        #expect(limit("Max cpu time").prefix(2) == ["3600", "3605"], "\(limits)")
        #expect(limit("Max open files").prefix(2) == ["64", "64"], "\(limits)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func aModuleInAWorkerFollowsTheJournalAndItsAcknowledgementsArePersistedByTheHost() async throws {
        let directory = try TemporaryDirectory()
        let journal = directory.path + "/journal"
        let state = directory.path + "/state"
        try FileManager.default.createDirectory(atPath: journal, withIntermediateDirectories: true)
        // A journal file written without a daemon (docs/platform-facts.md, The journal).
        var export = ""
        let base = UInt64(Date().timeIntervalSince1970 * 1e6)
        for index in 1...3 {
            export += "__REALTIME_TIMESTAMP=\(base + UInt64(index))\n__MONOTONIC_TIMESTAMP=\(index)\n"
            export += "_BOOT_ID=0123456789abcdef0123456789abcdef\nMESSAGE=entry \(index)\nSYSLOG_IDENTIFIER=isolation-test\nPRIORITY=6\n\n"
        }
        let remote = Process()
        remote.executableURL = URL(fileURLWithPath: "/lib/systemd/systemd-journal-remote")
        remote.arguments = ["-o", journal + "/test.journal", "-"]
        let input = Pipe()
        remote.standardInput = input
        remote.standardError = FileHandle.nullDevice
        try remote.run()
        input.fileHandleForWriting.write(Data(export.utf8))
        try input.fileHandleForWriting.close()
        remote.waitUntilExit()
        #expect(remote.terminationStatus == 0)

        let daemon = try await Daemon.running("""
            control: {socket: \(directory.path)/control.sock}
            state_directory: \(state)
            modules:
              acks:
                path: \(BuildProducts.fixture("FixtureJournalAck"))
                isolation: process
                config: {directory: \(journal), consumer: isolated-reader}
            """, in: directory)
        // From the host's replay ring: the module may have read them all before a tail connects.
        let results = try CLIProcess(["tail", "result.>", "--since", "1", "--json", "--count", "3", "--socket", socket(directory)],
                                     in: directory)
        let events = await results.finish().jsonLines.filter { $0["type"]?.stringValue == "event" }
        #expect(events.map { $0["name"]?.stringValue } == ["result.acked", "result.acked", "result.acked"], "\(events) \(daemon.output)")
        #expect(events.map { $0["fields"]?["message"]?.stringValue } == ["entry 1", "entry 2", "entry 3"])
        // The host's journal watch persisted the module's last acknowledgement.
        let cursor = try String(contentsOfFile: state + "/isolated-reader.cursor", encoding: .utf8)
        #expect(!cursor.isEmpty)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func aModuleInAWorkerUsesATimerTheHostRunsAndCombineOperatorsAsInProcess() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              rates:
                path: \(BuildProducts.directory)/libRateSummary.so
                isolation: process
                config: {match: ["user.>"], interval_seconds: 0.2}
            """), in: directory)
        // The module's timer runs in the host, as a shared source of the host's bus.
        #expect(await eventually {
            let sources = (try? ask(socket(directory), ["op": "status"]))?["sources"]?.arrayValue ?? []
            return sources.contains { $0["id"]?.stringValue == "timer:every 0.2 seconds" }
        }, "\(daemon.output)")
        // merge + scan in the worker: the window a tick closes counts the events posted before it.
        // A count no run reaches: at five summaries a second, a small one ended the tail by itself
        // while a loaded test run had not yet posted (seen in a full run at load 8).
        let summaries = try await tail(["summary.rate"], count: 1_000_000, directory)
        try postMany(socket(directory), name: "user.ping", count: 30)
        #expect(await eventually {
            summaries.stdout.split(separator: "\n").compactMap { try? JSON.parse(String($0)) }
                .compactMap { $0["fields"]?["total"]?.intValue }.reduce(0, +) == 30
        }, "\(summaries.stdout)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func aModuleRefusedInItsWorkerIsReportedAsInProcessAndTheHostRuns() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await Daemon.running(config(directory, modules: """
              mismatch:
                path: \(BuildProducts.fixture("FixtureABIMismatch"))
              throwing:
                path: \(BuildProducts.fixture("FixtureActivationThrows"))
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
            """), in: directory)
        #expect(daemon.output.contains("modules.mismatch: cannot load module \(BuildProducts.fixture("FixtureABIMismatch")): ABI mismatch"),
                "\(daemon.output)")
        #expect(daemon.output.contains("module throwing refused: activate threw: fixture refuses to start"), "\(daemon.output)")
        #expect(module("mismatch", directory)?["state"]?.stringValue == "failed")
        #expect(module("throwing", directory)?["state"]?.stringValue == "failed")
        #expect(module("counter", directory)?["state"]?.stringValue == "active")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }
}
