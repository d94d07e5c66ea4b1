import EventBusKit
import Foundation
import Testing

/// Modules built the way an author outside this repo builds them: their own package, depending
/// on the SDK by path (route 1 of docs/platform-facts.md, Loading modules) — each such build compiles the SDK again in its
/// own scratch folder (30–60 s), so the suite runs them one at a time — or compiling against the
/// prebuilt SDK of the host's build (seconds), which `eventbus module new` writes by default.
@Suite(.serialized) struct ModulePackageBuildTests {
    /// Builds the package and returns its products' folder, failing the test with the build log.
    private func build(package: String, scratch: String) async throws -> URL {
        let result = try await run(try swiftExecutable(), ["build", "--package-path", package, "--scratch-path", scratch])
        print("swift build --package-path \(package): \(String(format: "%.1f", result.seconds)) s")
        try #require(result.status == 0, "swift build failed:\n\(result.output)")
        return URL(fileURLWithPath: scratch).appendingPathComponent("debug")
    }

    /// The `hello` module built by `plugins/hello/Package.swift`, with its own copy of the SDK
    /// in its own build, loads into this process and shares this process's SDK: every cast holds.
    @Test(.timeLimit(.minutes(10)))
    func helloBuiltAsItsOwnPackageLoads() async throws {
        let products = try await build(
            package: BuildProducts.repository.appendingPathComponent("plugins/hello").path,
            scratch: BuildProducts.scratch.appendingPathComponent("module-packages/hello").path)
        let library = products.appendingPathComponent("libHello.so").path
        #expect(library != BuildProducts.library("Hello"))

        let harness = try ModuleHarness(library: library)
        expectLoadedWithOneSDK(harness, name: "hello", type: "Hello.Hello")
        let greeted = try harness.record("hello.greeted")
        try harness.activate()
        defer { harness.deactivate() }
        harness.bus.post("user.ping")
        #expect(await eventually { greeted.count == 1 })
        #expect(greeted.all.first?["event"] == "user.ping")
        #expect(greeted.all.first?["greeting"] == "hello")
    }

    /// `eventbus module new --from-source` writes a package that builds as it is and loads —
    /// against an SDK copy in a folder not named EventBusKit (the manifest names the package
    /// after its folder, as SwiftPM does).
    @Test(.timeLimit(.minutes(10)))
    func scaffoldBuildsFromTheSDKSourcesAndLoads() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("eventbus-scaffold-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let sdk = folder.appendingPathComponent("sdk-source").path
        try FileManager.default.createSymbolicLink(atPath: sdk, withDestinationPath: BuildProducts.repository.appendingPathComponent("plugins/EventBusKit").path)

        let created = try await run(BuildProducts.cli, ["module", "new", "demo-thing", "--path", folder.path, "--sdk", sdk])
        try #require(created.status == 0, "\(created.output)")
        let package = folder.appendingPathComponent("demo-thing")
        let products = try await build(package: package.path, scratch: package.appendingPathComponent(".build").path)

        let harness = try ModuleHarness(library: products.appendingPathComponent("libDemoThing.so").path,
                                        config: ["subscribe": .string("app.*")])
        expectLoadedWithOneSDK(harness, name: "demo-thing", type: "DemoThing.DemoThing")
        try harness.activate()
        defer { harness.deactivate() }
        harness.bus.post("user.ignored")
        harness.bus.post("app.ping")
        #expect(await eventually { harness.logged("info: app.ping #2 from user") })
        #expect(!harness.logged("user.ignored"))
    }

    /// `eventbus module new` (the prebuilt SDK: only the module compiles) writes a package whose
    /// library the real eventbusd loads — fingerprint checked — and runs, in eventbusd and in a
    /// worker process, with its declared config key checked and used.
    @Test(.timeLimit(.minutes(10)))
    func scaffoldBuiltAgainstThePrebuiltSDKRunsInTheRealHost() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("eventbus-prebuilt-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }

        let created = try await run(BuildProducts.cli, ["module", "new", "quick-thing", "--path", folder.path])
        try #require(created.status == 0, "\(created.output)")
        #expect(created.output.contains("against the prebuilt SDK in"), "\(created.output)")
        let package = folder.appendingPathComponent("quick-thing")
        let products = try await build(package: package.path, scratch: package.appendingPathComponent(".build").path)
        let library = products.appendingPathComponent("libQuickThing.so").path
        // Compiled against the SDK, not with a copy of it: only the module's own object was built.
        let built = try FileManager.default.contentsOfDirectory(atPath: products.path)
        #expect(!built.contains("libEventBusKit.so") && !built.contains { $0.hasPrefix("OpenCombine") }, "\(built)")

        let config = folder.appendingPathComponent("eventbus.yaml").path
        try Data("""
            modules:
              in-host:
                path: \(library)
                isolation: none
                config: {subscribe: "app.*"}
              in-worker:
                path: \(library)
                isolation: process
                config: {subscribe: "app.*"}
            """.utf8).write(to: URL(fileURLWithPath: config))
        let eventbusd = BuildProducts.folder.appendingPathComponent("eventbusd").path
        let check = try await run(eventbusd, ["--check-config", "--config", config])
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains("module in-host: loads, ABI ok, config ok"), "\(check.output)")

        let socket = folder.appendingPathComponent("control.sock").path
        let log = folder.appendingPathComponent("eventbusd.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: eventbusd)
        daemon.arguments = ["--config", config, "--socket", socket]
        let output = try FileHandle(forWritingTo: log)
        daemon.standardOutput = output
        daemon.standardError = output
        try daemon.run()
        try output.close()
        defer { if daemon.isRunning { kill(daemon.processIdentifier, SIGKILL) } }
        func logged(_ text: String) async -> Bool {
            await eventually { ((try? String(contentsOf: log, encoding: .utf8)) ?? "").contains(text) }
        }
        #expect(await logged("2 module(s) active, 0 refused"), "\((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
        let posted = try await run(BuildProducts.cli, ["post", "app.ping", "--socket", socket])
        #expect(posted.status == 0, "\(posted.output)")
        #expect(await logged("module=in-host [EventBusHost] app.ping #"))
        #expect(await logged("module=in-worker [EventBusHost] app.ping #"), "\((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
        kill(daemon.processIdentifier, SIGTERM)
        #expect(await eventually { !daemon.isRunning })
        #expect(daemon.terminationStatus == 0)
    }
}
