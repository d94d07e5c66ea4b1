import EventBusHost
import Foundation
import Testing

/// A reload applies as a whole or not at all, and `eventbus reload` (so `systemctl reload`)
/// says which by its exit status — through the real eventbusd and the real CLI, in both
/// isolation modes. The example `hello` module greets every `user.*` event with its
/// `greeting` and asks to be reactivated for a new one; `follower` throws from `activate` when
/// its section has `equals` without `field` (it passes the key check).
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ReloadAllOrNothingTests {
    typealias Daemon = DaemonProcessTests.Daemon

    private var hello: String { BuildProducts.fixture("Hello") }
    private var follower: String { BuildProducts.fixture("Follower") }

    private func runCLI(_ arguments: [String]) async throws -> ProcessResult {
        try await run(BuildProducts.directory + "/eventbus", arguments)
    }

    private func config(isolation: String, greeting: String, extra: String = "") -> String {
        """
        module_isolation: \(isolation)
        modules:
          hello:
            path: \(hello)
            config: {greeting: \(greeting)}
          follower:
            path: \(follower)
            config: {target: "x.>"}
        \(extra)
        """
    }

    /// The worker pid of each module, from `eventbus modules --json`.
    private func workerPIDs(_ socket: String) async throws -> String {
        let json = try await runCLI(["modules", "--json", "--socket", socket]).output
        let pids = json.split(separator: "\"pid\"").dropFirst().map { $0.prefix(12) }
        return pids.joined(separator: ",")
    }

    /// A section the module's declaration refuses, next to a valid change to another module:
    /// nothing changes, the reload exits 1 with the problem as `--check-config` says it, and
    /// the marker of the refused section goes once the file is back to what runs.
    @Test(arguments: ["none", "process"])
    func aRefusedSectionRefusesTheWholeReload(isolation: String) async throws {
        let directory = try TemporaryDirectory()
        let socket = "\(directory.path)/control.sock"
        let file = try directory.write("eventbus.yaml", config(isolation: isolation, greeting: "first"))
        let daemon = try Daemon(arguments: ["--config", file, "--socket", socket], in: directory)
        #expect(await daemon.waitFor("ready; SIGHUP reloads"), "\(daemon.output)")
        let pidsBefore = try await workerPIDs(socket)

        // hello's change is fine; the follower's section has a key it does not declare.
        try directory.write("eventbus.yaml", config(isolation: isolation, greeting: "second")
            .replacingOccurrences(of: "{target: \"x.>\"}", with: "{target: \"x.>\", feild: message}"))
        let problem = "\(file):8: modules.follower.config.feild: unknown key (did you mean field?)"
        let reload = try await runCLI(["reload", "--socket", socket])
        #expect(reload.status == 1, "\(reload.output)")
        #expect(reload.output.contains(problem), "\(reload.output)")
        #expect(reload.output.contains("reload refused (1 problem(s)): nothing was changed, the running config stays"), "\(reload.output)")
        // --check-config finds the same problem in the same file.
        let check = try Daemon(arguments: ["--check-config", "--config", file], in: directory)
        #expect(await check.exitStatus() == 1, "\(check.output)")
        #expect(check.output.contains(problem), "\(check.output)")

        // Nothing changed: hello greets as before, in the same worker.
        _ = try await runCLI(["post", "user.one", "--socket", socket])
        #expect(await daemon.waitFor("first, user.one from user"), "\(daemon.output)")
        #expect(try await workerPIDs(socket) == pidsBefore)
        let modules = try await runCLI(["modules", "--socket", socket]).output
        #expect(modules.contains("active (old config)"), "\(modules)")
        #expect(modules.contains("runs on its previous config; the file's section: config refused: modules.follower.config.feild"), "\(modules)")

        // The file put back to what runs: the reload applies (nothing to do) and the marker goes.
        try directory.write("eventbus.yaml", config(isolation: isolation, greeting: "first"))
        let back = try await runCLI(["reload", "--socket", socket])
        #expect(back.status == 0, "\(back.output)")
        #expect(try await !runCLI(["modules", "--socket", socket]).output.contains("old config"))
        #expect(try await workerPIDs(socket) == pidsBefore)

        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// A section that passes the key check but makes the new instance's `activate` throw: the
    /// running instance keeps running (it was never stopped), the other module's change is not
    /// applied either, the reload exits 1 naming the module's entry; a good file then applies.
    @Test(arguments: ["none", "process"])
    func aNewInstanceThatFailsToActivateLeavesTheRunningOne(isolation: String) async throws {
        let directory = try TemporaryDirectory()
        let socket = "\(directory.path)/control.sock"
        let file = try directory.write("eventbus.yaml", config(isolation: isolation, greeting: "first"))
        let daemon = try Daemon(arguments: ["--config", file, "--socket", socket], in: directory)
        #expect(await daemon.waitFor("ready; SIGHUP reloads"), "\(daemon.output)")
        let pidsBefore = try await workerPIDs(socket)

        try directory.write("eventbus.yaml", config(isolation: isolation, greeting: "second")
            .replacingOccurrences(of: "{target: \"x.>\"}", with: "{target: \"x.>\", equals: y}"))
        let reload = try await runCLI(["reload", "--socket", socket])
        #expect(reload.status == 1, "\(reload.output)")
        #expect(reload.output.contains("\(file):7: modules.follower: activate threw:"), "\(reload.output)")
        #expect(reload.output.contains("\"equals\" and \"contains\" need \"field\""), "\(reload.output)")

        let modules = try await runCLI(["modules", "--socket", socket]).output
        #expect(!modules.contains("failed"), "\(modules)")
        #expect(try await workerPIDs(socket) == pidsBefore)
        _ = try await runCLI(["post", "user.one", "--socket", socket])
        #expect(await daemon.waitFor("first, user.one from user"), "\(daemon.output)")

        // A good file applies: hello's new instance greets, and the reload says so with 0.
        try directory.write("eventbus.yaml", config(isolation: isolation, greeting: "second"))
        let good = try await runCLI(["reload", "--socket", socket])
        #expect(good.status == 0, "\(good.output)")
        #expect(good.output.contains("2 module(s) active"), "\(good.output)")
        _ = try await runCLI(["post", "user.two", "--socket", socket])
        #expect(await daemon.waitFor("second, user.two from user"), "\(daemon.output)")

        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// A new module whose file does not load, a removed module and a changed one in the same
    /// file: the removed one keeps running, and SIGHUP — which no one waits on — logs the refusal
    /// just as `eventbus reload` answers it.
    @Test func aSIGHUPReloadIsAllOrNothingToo() async throws {
        let directory = try TemporaryDirectory()
        let socket = "\(directory.path)/control.sock"
        let file = try directory.write("eventbus.yaml", config(isolation: "process", greeting: "first"))
        let daemon = try Daemon(arguments: ["--config", file, "--socket", socket], in: directory)
        #expect(await daemon.waitFor("ready; SIGHUP reloads"), "\(daemon.output)")

        try directory.write("eventbus.yaml", """
            module_isolation: process
            modules:
              hello:
                path: \(hello)
                config: {greeting: second}
              missing:
                path: \(directory.path)/libMissing.so
            """)
        daemon.signal(SIGHUP)
        #expect(await daemon.waitFor("\(file):7: modules.missing: cannot load module \(directory.path)/libMissing.so"), "\(daemon.output)")
        #expect(await daemon.waitFor("reload refused (1 problem(s))"), "\(daemon.output)")
        let modules = try await runCLI(["modules", "--socket", socket]).output
        #expect(modules.contains("follower"), "\(modules)")
        #expect(!modules.contains("missing"), "\(modules)")
        _ = try await runCLI(["post", "user.one", "--socket", socket])
        #expect(await daemon.waitFor("first, user.one from user"), "\(daemon.output)")

        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }
}
