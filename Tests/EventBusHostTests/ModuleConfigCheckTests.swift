import EventBusHost
import Foundation
import Testing

/// A module's config section checked against the keys the module declares
/// (`static let configKeys`), through the real eventbusd: `--check-config`, a starting host in
/// both isolation modes, and a SIGHUP reload. The example `hello` module declares `greeting`
/// (a string); `rate-summary` declares `match` (strings) and `interval_seconds` (a number from 0.001 to 1e9).
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ModuleConfigCheckTests {
    typealias Daemon = DaemonProcessTests.Daemon

    private var hello: String { BuildProducts.fixture("Hello") }
    private var rateSummary: String { BuildProducts.fixture("RateSummary") }

    private func runCLI(_ arguments: [String]) async throws -> ProcessResult {
        try await run(BuildProducts.directory + "/eventbus", arguments)
    }

    @Test func checkConfigRefusesATypoAndAWrongTypeNamingFileLineKeyAndTheValidKeys() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("eventbus.yaml", """
            modules:
              hello:
                path: \(hello)
                config:
                  greting: hi
              rate:
                path: \(rateSummary)
                config:
                  match: ["user.>"]
                  interval_seconds: ten
            """)
        let check = try Daemon(arguments: ["--check-config", "--config", config], in: directory)
        #expect(await check.exitStatus() == 1, "\(check.output)")
        let output = check.output
        #expect(output.contains("\(config):5: modules.hello.config.greting: unknown key (did you mean greeting?); expected one of: greeting"), "\(output)")
        #expect(output.contains("modules.hello.config takes: greeting (a string, default \"hello\": the word it greets with)"), "\(output)")
        #expect(output.contains("\(config):10: modules.rate.config.interval_seconds: expected a number from 0.001 to 1000000000, found the string \"ten\""), "\(output)")
        #expect(output.contains("modules.rate.config takes: match (a list of strings"), "\(output)")
        #expect(output.contains("interval_seconds (a number from 0.001 to 1000000000, default 10.0"), "\(output)")
        #expect(output.contains("2 problem(s) found"), "\(output)")
        #expect(!output.contains("\nok\n"))
    }

    @Test func checkConfigReportsEveryProblemOfASectionInFileOrder() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("eventbus.yaml", """
            modules:
              rate:
                path: \(rateSummary)
                config:
                  match: ["user.>", 3]
                  interval_seconds: 0
                  windows: 2
            """)
        let check = try Daemon(arguments: ["--check-config", "--config", config], in: directory)
        #expect(await check.exitStatus() == 1, "\(check.output)")
        let lines = check.output.split(separator: "\n").map(String.init)
        let problems = lines.filter { $0.contains("\(config):") && $0.contains("modules.rate.config.") }
        #expect(problems.count == 3, "\(check.output)")
        #expect(problems.first?.hasSuffix("\(config):5: modules.rate.config.match[1]: expected a string, found the integer 3") == true, "\(problems)")
        #expect(problems.dropFirst().first?.hasSuffix("\(config):6: modules.rate.config.interval_seconds: must be at least 0.001, found 0") == true, "\(problems)")
        #expect(problems.last?.hasSuffix("\(config):7: modules.rate.config.windows: unknown key; expected one of: match, interval_seconds") == true, "\(problems)")
    }

    @Test func checkConfigPassesAGoodSectionAndSaysWhenAModuleDeclaresNothing() async throws {
        let directory = try TemporaryDirectory()
        let config = try directory.write("eventbus.yaml", """
            modules:
              hello:
                path: \(hello)
                config: {greeting: hi}
              stalled:
                path: \(BuildProducts.fixture("FixtureStalled"))
                config: {anything: 1}
            """)
        let check = try Daemon(arguments: ["--check-config", "--config", config], in: directory)
        #expect(await check.exitStatus() == 0, "\(check.output)")
        #expect(check.output.contains("module hello: loads, ABI ok, config ok"), "\(check.output)")
        #expect(check.output.contains("module stalled: loads, ABI ok, config not checked (the module declares no configKeys)"), "\(check.output)")
    }

    /// One bad module of each isolation mode is refused with file, line and key; the good ones
    /// run and handle events; the host carries on.
    @Test(arguments: ["none", "process"])
    func aRunningHostRefusesTheBadModuleAndRunsTheOther(isolation: String) async throws {
        let directory = try TemporaryDirectory()
        let socket = "\(directory.path)/control.sock"
        let config = try directory.write("eventbus.yaml", """
            module_isolation: \(isolation)
            modules:
              typo:
                path: \(hello)
                config:
                  greting: hi
              good:
                path: \(hello)
                config: {greeting: howdy}
              wrong-type:
                path: \(rateSummary)
                config:
                  interval_seconds: ten
            """)
        let daemon = try Daemon(arguments: ["--config", config, "--socket", socket], in: directory)
        #expect(await daemon.waitFor("ready; SIGHUP reloads"), "\(daemon.output)")
        let output = daemon.output
        #expect(output.contains("\(config):6: modules.typo.config.greting: unknown key (did you mean greeting?); expected one of: greeting"), "\(output)")
        #expect(output.contains("module typo refused: its config section does not fit what it declares (modules.typo.config takes: greeting"), "\(output)")
        #expect(output.contains("\(config):13: modules.wrong-type.config.interval_seconds: expected a number from 0.001 to 1000000000, found the string \"ten\""), "\(output)")
        #expect(output.contains("module good active (hello 1.0.0"), "\(output)")
        #expect(output.contains("1 module(s) active, 2 refused"), "\(output)")

        // The good one works: its greeting comes from its own section.
        let posted = try await runCLI(["post", "user.ping", "--socket", socket])
        #expect(posted.status == 0, "\(posted.output)")
        #expect(await daemon.waitFor("howdy, user.ping from user"), "\(daemon.output)")
        let modules = try await runCLI(["modules", "--socket", socket])
        #expect(modules.output.contains("config refused: modules.typo.config.greting: unknown key"), "\(modules.output)")

        // Fixed and reloaded: the refused module starts.
        try directory.write("eventbus.yaml", try String(contentsOfFile: config, encoding: .utf8)
            .replacingOccurrences(of: "greting: hi", with: "greeting: hi"))
        daemon.signal(SIGHUP)
        #expect(await daemon.waitFor("module typo active (hello 1.0.0"), "\(daemon.output)")

        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// A reload with a bad section is refused and keeps the module running with its previous
    /// section (both isolation modes); a reload with a good one applies it.
    @Test(arguments: ["none", "process"])
    func aReloadWithABadSectionKeepsThePreviousOne(isolation: String) async throws {
        let directory = try TemporaryDirectory()
        let socket = "\(directory.path)/control.sock"
        func config(_ section: String) -> String {
            """
            module_isolation: \(isolation)
            modules:
              hello:
                path: \(hello)
                config: \(section)
            """
        }
        let file = try directory.write("eventbus.yaml", config("{greeting: first}"))
        let daemon = try Daemon(arguments: ["--config", file, "--socket", socket], in: directory)
        #expect(await daemon.waitFor("module hello active"), "\(daemon.output)")

        try directory.write("eventbus.yaml", config("{greeting: 3}"))
        daemon.signal(SIGHUP)
        #expect(await daemon.waitFor("\(file):5: modules.hello.config.greeting: expected a string, found the integer 3"), "\(daemon.output)")
        #expect(await daemon.waitFor("module hello's new section is refused (modules.hello.config takes: greeting"), "\(daemon.output)")
        // Not only the log: `modules`, `status` and the reload's own answer say it.
        let modules = try await runCLI(["modules", "--socket", socket]).output
        #expect(modules.contains("active (old config)"), "\(modules)")
        #expect(modules.contains("runs on its previous config; the file's section: config refused: modules.hello.config.greeting: expected a string"), "\(modules)")
        let reload = try await runCLI(["reload", "--socket", socket])
        #expect(reload.status == 1, "\(reload.output)")
        #expect(reload.output.contains("\(file):5: modules.hello.config.greeting: expected a string, found the integer 3"), "\(reload.output)")
        _ = try await runCLI(["post", "user.one", "--socket", socket])
        #expect(await daemon.waitFor("first, user.one from user"), "\(daemon.output)")

        try directory.write("eventbus.yaml", config("{greeting: second}"))
        daemon.signal(SIGHUP)
        #expect(await daemon.waitFor("module hello restarts with its new config"), "\(daemon.output)")
        // The reactivation is done once the module is active again.
        #expect(await eventually { daemon.output.components(separatedBy: "module hello active").count == 3 }, "\(daemon.output)")
        _ = try await runCLI(["post", "user.two", "--socket", socket])
        #expect(await daemon.waitFor("second, user.two from user"), "\(daemon.output)")
        #expect(try await !runCLI(["modules", "--socket", socket]).output.contains("old config"))

        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }
}
