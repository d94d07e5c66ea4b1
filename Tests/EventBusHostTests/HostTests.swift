import EventBusHost
import EventBusKit
import Foundation
import InMemoryLogging
import Logging
import Testing

/// The host with real module shared objects: isolation of failing and throwing modules,
/// reload, shutdown.
@Suite struct HostTests {
    /// A host on a temp config file; `yaml` may use `$FIXTURES` for the build folder.
    struct Harness {
        let directory: TemporaryDirectory
        let configPath: String
        let host: BusHost
        let log: InMemoryLogHandler

        init(_ yaml: String, moduleCallTimeout: Duration = .seconds(60)) throws {
            directory = try TemporaryDirectory()
            configPath = try directory.write("eventbus.yaml", Harness.expand(yaml))
            let (logger, handler) = recordingLogger()
            log = handler
            host = BusHost(configPath: configPath, logger: logger, moduleCallTimeout: moduleCallTimeout)
        }

        /// These tests cover modules inside the host (mailbox stalls, call time limits, reload of
        /// loaded code); `module_isolation: none` keeps them there. IsolationTests covers workers.
        static func expand(_ yaml: String) -> String {
            // Appended, so the lines tests name in expected errors stay where they are.
            yaml.replacingOccurrences(of: "$FIXTURES", with: BuildProducts.directory) + "\nmodule_isolation: none\n"
        }

        func rewrite(_ yaml: String) throws {
            try directory.write("eventbus.yaml", Harness.expand(yaml))
        }

        func state(_ name: String) -> ModuleState? {
            host.moduleStatistics.first { $0.name == name }?.state
        }

        func statistics(_ name: String) -> ModuleStatistics? {
            host.moduleStatistics.first { $0.name == name }
        }

        func logged(_ level: Logger.Level, _ text: String) -> Bool {
            log.entries.contains { $0.level == level && $0.text.contains(text) }
        }

        /// Posts `test.report` and returns the `result.<name>` event the module answers with.
        func report(_ result: String) async throws -> Event {
            let collector = try EventCollector(host.bus, result)
            host.bus.post("test.report")
            return try #require(await collector.first())
        }
    }

    @Test func aModuleWhoseActivationThrowsIsRefusedAndItsSubscriptionsCancelled() async throws {
        let harness = try Harness("""
            modules:
              thrower:
                path: $FIXTURES/libFixtureActivationThrows.so
              counter:
                path: $FIXTURES/libFixtureCounter.so
            """)
        try await harness.host.start()
        #expect(harness.state("thrower") == .failed("activate threw: fixture refuses to start"))
        #expect(harness.state("counter") == .active)
        #expect(harness.logged(.error, "module thrower refused: activate threw: fixture refuses to start"))
        // Only the counter's subscription is left; the thrower's timer never stays running.
        #expect(await eventually { harness.host.bus.statistics.subscriptions == 1 })
        #expect(harness.host.bus.statistics.sources.isEmpty)
        // The host carries on: the other module gets events.
        harness.host.bus.post("test.one")
        let result = try await harness.report("result.counter.counter")
        #expect(result["count"] == 1)
        #expect(await harness.host.shutdown().isClean)
    }

    @Test func aModuleThatThrowsInItsHandlerIsCountedAndKeepsReceiving() async throws {
        let harness = try Harness("""
            modules:
              throwing:
                path: $FIXTURES/libFixtureThrowingHandler.so
              counter:
                path: $FIXTURES/libFixtureCounter.so
            """)
        try await harness.host.start()
        for index in 0..<10 {
            harness.host.bus.post("test.item", fields: ["fail": .bool(index % 3 == 0)])  // 0, 3, 6, 9 fail
        }
        let throwing = try await harness.report("result.throwing")
        #expect(throwing["count"] == 6)
        let counter = try await harness.report("result.counter.counter")
        #expect(counter["count"] == 10)
        #expect(harness.statistics("throwing")?.errors == 4)
        #expect(harness.statistics("throwing")?.state == .active)
        #expect(harness.log.entries.filter { $0.module == "throwing" && $0.text.contains("fixture handler fails on purpose") }.count == 4)
        #expect(await harness.host.shutdown().isClean)
    }

    @Test func reloadAddsRemovesAndReconfiguresModules() async throws {
        let harness = try Harness("""
            modules:
              a:
                path: $FIXTURES/libFixtureCounter.so
                config: {id: a}
              b:
                path: $FIXTURES/libFixtureCounter.so
                config: {id: b}
            """)
        try await harness.host.start()
        #expect(harness.host.moduleStatistics.map(\.name) == ["a", "b"])

        try harness.rewrite("""
            modules:
              a:
                path: $FIXTURES/libFixtureCounter.so
                config: {id: a, note: same pattern}
              c:
                path: $FIXTURES/libFixtureCounter.so
                config: {id: c, pattern: "other.>"}
            """)
        #expect(await harness.host.reload().isApplied)
        #expect(harness.host.moduleStatistics.map(\.name) == ["a", "c"])
        #expect(harness.logged(.info, "module b deactivated (removed from the config)"))
        #expect(harness.logged(.info, "module a applied its new config"))  // same pattern: applied
        #expect(harness.state("c") == .active)
        harness.host.bus.post("other.thing")
        #expect(try await harness.report("result.counter.c")["count"] == 1)

        // A new pattern: the fixture asks to be reactivated.
        try harness.rewrite("""
            modules:
              a:
                path: $FIXTURES/libFixtureCounter.so
                config: {id: a, pattern: "fresh.>"}
              c:
                path: $FIXTURES/libFixtureCounter.so
                config: {id: c, pattern: "other.>"}
                enabled: false
            """)
        #expect(await harness.host.reload().isApplied)
        #expect(harness.logged(.info, "module a restarts with its new config"))
        #expect(harness.state("a") == .active)
        #expect(harness.state("c") == .disabled)
        harness.host.bus.post("fresh.one")
        #expect(try await harness.report("result.counter.a")["count"] == 1)
        #expect(await harness.host.shutdown().isClean)
    }

    @Test func reloadKeepsTheRunningConfigWhenTheNewOneIsBadAndWarnsAboutPathChanges() async throws {
        let harness = try Harness("""
            modules:
              a:
                path: $FIXTURES/libFixtureCounter.so
            """)
        try await harness.host.start()
        try harness.rewrite("""
            modules:
              a:
                path: [not, a, string]
            """)
        #expect(await harness.host.reload().isApplied == false)
        #expect(harness.logged(.error, "reload failed, keeping the running config: \(harness.configPath):3: modules.a.path: expected a string, found a list"))
        #expect(harness.state("a") == .active)

        let copy = harness.directory.path + "/libCopy.so"
        try FileManager.default.copyItem(atPath: BuildProducts.fixture("FixtureCounter"), toPath: copy)
        try harness.rewrite("""
            modules:
              a:
                path: libCopy.so
            """)
        #expect(await harness.host.reload().isApplied)
        #expect(harness.logged(.warning, "modules.a.path changed from \(BuildProducts.fixture("FixtureCounter")) to \(copy)"))
        #expect(harness.logged(.warning, "keeps running the old file until eventbusd restarts"))
        #expect(harness.statistics("a")?.path == BuildProducts.fixture("FixtureCounter"))
        #expect(harness.state("a") == .active)
        #expect(await harness.host.shutdown().isClean)
    }

    @Test func aModuleThatFailedToLoadIsRetriedOnReload() async throws {
        let harness = try Harness("""
            modules:
              late:
                path: libLate.so
            """)
        try await harness.host.start()
        #expect(harness.state("late") == .failed("cannot load module \(harness.directory.path)/libLate.so: no such file"))
        try FileManager.default.copyItem(atPath: BuildProducts.fixture("FixtureCounter"),
                                         toPath: harness.directory.path + "/libLate.so")
        #expect(await harness.host.reload().isApplied)
        #expect(harness.state("late") == .active)
        #expect(await harness.host.shutdown().isClean)
    }

    @Test func shutdownDrainsDeactivatesAndRefusesLaterReloads() async throws {
        let harness = try Harness("""
            shutdown_timeout: 30s
            sources:
              timers:
                - {name: fast, every: 50ms}
            modules:
              counter:
                path: $FIXTURES/libFixtureCounter.so
                config: {pattern: timer.tick}
            """)
        try await harness.host.start()
        #expect(harness.host.bus.statistics.sources.count == 1)  // the host holds the timer
        #expect(await eventually { harness.logged(.info, "first event timer.tick") })
        // Its ticks say which configured timer fired.
        let names = Collected<Set<String>>([])
        let tap = try harness.host.bus.publisher(for: "timer.tick").sink(receiveValue: { event in
            names.update { _ = $0.insert(event.timerTick?.name ?? "none") }
        })
        #expect(await eventually { names.value == ["fast"] })
        tap.cancel()
        let report = await harness.host.shutdown()
        #expect(report.isClean)
        #expect(harness.state("counter") == .stopped)
        #expect(harness.logged(.info, "timer fast stopped"))
        #expect(await harness.host.reload().isApplied == false)
    }

    @Test func startFailsOnABadConfig() async throws {
        let harness = try Harness("modules: 3\n")
        await #expect(throws: ConfigError.self) { try await harness.host.start() }
    }
}
