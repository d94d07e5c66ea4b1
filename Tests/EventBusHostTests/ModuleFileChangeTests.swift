import ControlProtocol
import Foundation
import Testing

/// A module rebuilt in place, with the real eventbusd and real worker processes: a reload starts
/// a worker with the new file, `modules` shows what the running worker loaded, and a file that
/// is no longer a module is refused once with the reason rather than retried as a crash.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ModuleFileChangeTests {
    typealias Daemon = DaemonProcessTests.Daemon

    /// Puts `fixture`'s library at `path` the way a build does: written beside it, renamed over it.
    func install(_ source: String, at path: String) throws {
        let staged = path + ".new"
        try? FileManager.default.removeItem(atPath: staged)
        try FileManager.default.copyItem(atPath: source, toPath: staged)
        guard rename(staged, path) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno)!) }
    }

    @Test func aRebuiltModuleRunsAfterAReloadAndAnUnloadableOneIsRefusedOnce() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let module = directory.path + "/libModule.so"
        try install(BuildProducts.fixture("FixtureCounter"), at: module)
        let daemon = try await Daemon.running("""
            control: {socket: \(socket)}
            modules:
              m:
                path: \(module)
                worker: {restart_delay: 50ms}
            """, in: directory)
        func state() -> JSON? {
            (try? ask(socket, ["op": "modules"]))?["modules"]?.arrayValue?.first { $0["name"]?.stringValue == "m" }
        }
        #expect(state()?["reported_name"]?.stringValue == "fixture-counter", "\(String(describing: state())) \(daemon.output)")
        let firstPID = try #require(state()?["pid"]?.intValue)

        // Rebuilt in place, then a reload: a new worker runs the new file.
        try install(BuildProducts.fixture("FixtureCrashing"), at: module)
        let reload = try await eventbus(["reload", "--socket", socket], in: directory)
        #expect(reload.status == 0, "\(reload.stderr)")
        #expect(await eventually { state()?["reported_name"]?.stringValue == "fixture-crashing" }, "\(String(describing: state()))")
        #expect(state()?["pid"]?.intValue != firstPID)
        #expect(await daemon.waitFor("module m restarts: its file \(module) was replaced since it was loaded"))
        // A reload with nothing changed leaves the worker alone.
        let pid = state()?["pid"]?.intValue
        _ = try await eventbus(["reload", "--socket", socket], in: directory)
        #expect(state()?["pid"]?.intValue == pid)

        // Replaced again, and the worker crashes: its restart loads the new file, and says so.
        try install(BuildProducts.fixture("FixtureCounter"), at: module)
        _ = try ask(socket, ["op": "post", "name": "test.crash"])
        #expect(await eventually { state()?["restarts"]?.intValue == 1 && state()?["state"]?.stringValue == "active" })
        #expect(state()?["reported_name"]?.stringValue == "fixture-counter", "\(String(describing: state()))")

        // No longer a module, and the worker dies: refused once, with the reason, not retried.
        try install(try directory.write("garbage", String(repeating: "not a module\n", count: 10)), at: module)
        let watcher = try CLIProcess(["tail", "module.>", "--json", "--socket", socket], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        kill(pid_t(try #require(state()?["pid"]?.intValue)), SIGKILL)
        #expect(await eventually { state()?["state"]?.stringValue == "failed" }, "\(String(describing: state()))")
        let reason = state()?["reason"]?.stringValue ?? ""
        #expect(reason.hasPrefix("its file can no longer be loaded:"), "\(reason)")
        #expect(state()?["restarts"]?.intValue == 2, "one restart for the crash, none for the refusal")
        _ = try ask(socket, ["op": "post", "name": "test.after"])
        #expect(await eventually { watcher.stdout.contains("module.failed") })
        #expect(daemon.output.components(separatedBy: "module not restarted").count == 2, "said once: \(daemon.output)")

        // Fixed and reloaded: running again.
        try install(BuildProducts.fixture("FixtureCounter"), at: module)
        _ = try await eventbus(["reload", "--socket", socket], in: directory)
        #expect(await eventually { state()?["state"]?.stringValue == "active" }, "\(String(describing: state()))")
        kill(watcher.process.processIdentifier, SIGKILL)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }
}
