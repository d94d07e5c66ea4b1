import EventBusKit
import Foundation
import Testing

/// Modules built the way an author outside this repo builds them: their own package, depending
/// on the SDK by path (route 1 of DESIGN.md §3). Each build compiles the SDK again in its own
/// scratch folder (30–60 s), so the suite runs them one at a time.
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

    /// `eventbus module new` writes a package that builds as it is and loads.
    @Test(.timeLimit(.minutes(10)))
    func scaffoldBuildsAndLoads() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("eventbus-scaffold-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }

        let created = try await run(BuildProducts.cli, ["module", "new", "demo-thing", "--path", folder.path])
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
}
