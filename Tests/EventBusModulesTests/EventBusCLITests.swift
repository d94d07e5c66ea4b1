import Foundation
import Testing

/// The `eventbus module` commands, run as the built binary.
@Suite struct EventBusCLITests {
    private let repositorySDK = BuildProducts.repository.appendingPathComponent("plugins/EventBusKit").path

    private func temporaryFolder() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("eventbus-cli-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    private func environment(sdk: String?) -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["EVENTBUS_SDK"] = sdk
        return environment
    }

    @Test func sdkPathFindsTheCheckoutsSDKFromTheExecutable() async throws {
        let result = try await run(BuildProducts.cli, ["module", "sdk-path"], environment: environment(sdk: nil))
        #expect(result.status == 0)
        #expect(result.output == repositorySDK + "\n")
    }

    @Test func sdkPathPrefersTheOptionThenTheEnvironment() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let linked = folder.appendingPathComponent("EventBusKit").path
        try FileManager.default.createSymbolicLink(atPath: linked, withDestinationPath: repositorySDK)

        let fromEnvironment = try await run(BuildProducts.cli, ["module", "sdk-path"], environment: environment(sdk: linked))
        #expect(fromEnvironment.output == linked + "\n")
        let fromOption = try await run(BuildProducts.cli, ["module", "sdk-path", "--sdk", repositorySDK],
                                       environment: environment(sdk: linked))
        #expect(fromOption.output == repositorySDK + "\n")

        let renamed = folder.appendingPathComponent("sdk-copy").path
        try FileManager.default.createSymbolicLink(atPath: renamed, withDestinationPath: repositorySDK)
        let anyName = try await run(BuildProducts.cli, ["module", "sdk-path"], environment: environment(sdk: renamed))
        #expect(anyName.status == 0 && anyName.output == renamed + "\n", "a copy may be named anything: \(anyName.output)")
        let scaffold = try await run(BuildProducts.cli, ["module", "new", "disk-watch", "--path", folder.path, "--sdk", renamed])
        #expect(scaffold.status == 0, "\(scaffold.output)")
        let manifest = try String(contentsOf: folder.appendingPathComponent("disk-watch/Package.swift"), encoding: .utf8)
        #expect(manifest.contains(".product(name: \"EventBusKit\", package: \"sdk-copy\")"), "\(manifest)")

        let wrong = try await run(BuildProducts.cli, ["module", "sdk-path"], environment: environment(sdk: folder.path))
        #expect(wrong.status == 1)
        #expect(wrong.output.contains("is not the EventBusKit SDK package"))
        let notSDK = folder.appendingPathComponent("other/EventBusKit")
        try FileManager.default.createDirectory(at: notSDK, withIntermediateDirectories: true)
        let empty = try await run(BuildProducts.cli, ["module", "sdk-path", "--sdk", notSDK.path])
        #expect(empty.status == 1)
        #expect(empty.output.contains("is not the EventBusKit SDK package"))
    }

    @Test(arguments: [
        ("Disk-Watch", "invalid module name"), ("disk_watch", "invalid module name"), ("x-", "invalid module name"),
        ("disk--watch", "invalid module name"), ("9lives", "invalid module name"), ("", "invalid module name"),
        ("event-bus-kit", "would clash with EventBusKit"), ("any", "would clash with Any"),
    ])
    func newRefusesInvalidNames(name: String, message: String) async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let result = try await run(BuildProducts.cli, ["module", "new", name, "--path", folder.path])
        #expect(result.status == 64)  // EX_USAGE
        #expect(result.output.contains(message))
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).isEmpty)
    }

    @Test func newRefusesAFolderThatExists() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let existing = folder.appendingPathComponent("disk-watch")
        try FileManager.default.createDirectory(at: existing, withIntermediateDirectories: true)
        try Data("mine".utf8).write(to: existing.appendingPathComponent("notes.txt"))

        let result = try await run(BuildProducts.cli, ["module", "new", "disk-watch", "--path", folder.path])
        #expect(result.status == 1)
        #expect(result.output.contains("\(existing.path) already exists"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: existing.path) == ["notes.txt"])
    }

    @Test func newCreatesAMissingParentFolder() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let parent = folder.appendingPathComponent("not/yet/here")
        let result = try await run(BuildProducts.cli, ["module", "new", "disk-watch", "--path", parent.path])
        #expect(result.status == 0, "\(result.output)")
        #expect(FileManager.default.fileExists(atPath: parent.appendingPathComponent("disk-watch/Package.swift").path))
    }

    /// By default against the prebuilt SDK next to the CLI — here, the build folder it was built
    /// into, which holds EventBusKit's module, OpenCombine's and libEventBusKit.so.
    @Test func newWritesAPackageAgainstThePrebuiltSDK() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let result = try await run(BuildProducts.cli, ["module", "new", "disk-watch", "--path", folder.path])
        #expect(result.status == 0, "\(result.output)")
        let products = BuildProducts.folder.resolvingSymlinksInPath().path
        let manifest = try String(contentsOf: folder.appendingPathComponent("disk-watch/Package.swift"), encoding: .utf8)
        #expect(manifest.contains("let sdkModules = \"\(products)/Modules\""), "\(manifest)")
        #expect(manifest.contains("let sdkModuleMap = \"\(products)/COpenCombineHelpers.build/module.modulemap\""), "\(manifest)")
        #expect(manifest.contains("let sdkLibrary = \"\(products)\""), "\(manifest)")
        #expect(!manifest.contains(".package(path:"))
        let source = try String(contentsOf: folder.appendingPathComponent("disk-watch/Sources/DiskWatch/DiskWatch.swift"), encoding: .utf8)
        #expect(source.contains("static let configKeys: ModuleConfigKeys = ["))

        let printed = try await run(BuildProducts.cli, ["module", "sdk-path", "--prebuilt"])
        #expect(printed.output == "modules: \(products)/Modules\nmodule map: \(products)/COpenCombineHelpers.build/module.modulemap\nlibrary: \(products)\n")
    }

    @Test func newWritesAPackageAgainstTheSDKSources() async throws {
        let folder = try temporaryFolder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let result = try await run(BuildProducts.cli, ["module", "new", "disk-watch", "--path", folder.path, "--from-source"])
        #expect(result.status == 0, "\(result.output)")

        let package = folder.appendingPathComponent("disk-watch")
        let files = FileManager.default
        for file in ["Package.swift", "Sources/DiskWatch/DiskWatch.swift", "README.md", "sample.yaml"] {
            #expect(files.fileExists(atPath: package.appendingPathComponent(file).path), "\(file)")
        }
        let manifest = try String(contentsOf: package.appendingPathComponent("Package.swift"), encoding: .utf8)
        #expect(manifest.contains(".package(path: \"\(repositorySDK)\")"))
        #expect(manifest.contains(".library(name: \"DiskWatch\", type: .dynamic"))
        let source = try String(contentsOf: package.appendingPathComponent("Sources/DiskWatch/DiskWatch.swift"), encoding: .utf8)
        #expect(source.contains("@_cdecl(\"eventbus_module\") public func entry() -> UnsafeRawPointer { exportModule(DiskWatch.init) }"))
        let sample = try String(contentsOf: package.appendingPathComponent("sample.yaml"), encoding: .utf8)
        #expect(sample.contains("  disk-watch:\n    path: \(package.path)/.build/release/libDiskWatch.so\n    config:\n"))
    }
}
