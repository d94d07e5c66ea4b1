import EventBusHost
import EventBusKit
import Foundation
import ModuleLoading
import Testing

/// The issue's case: a module built against a copy of the SDK whose public struct changed, with
/// nobody bumping anything. Built for real, the way an outside author builds one (its own
/// package, the SDK by path; route 1 of docs/platform-facts.md, Loading modules), against a copy of this repository's SDK with
/// one stored property added to the public `Gap` struct. Its build generates another
/// fingerprint, so every way into the host refuses it. One package build (30–90 s on 2 cores).
@Suite(.serialized) struct ChangedInterfaceTests {
    @Test(.timeLimit(.minutes(10)))
    func aModuleBuiltAgainstAChangedSDKIsRefusedEverywhere() async throws {
        let directory = try TemporaryDirectory("eventbus-changed-sdk")
        let repository = BuildProducts.repository
        // The SDK and the hello module, copied without build folders; `../EventBusKit` in hello's
        // manifest then names the changed copy.
        for package in ["EventBusKit", "hello"] {
            let copy = try await run("/bin/cp", ["-a", "\(repository)/plugins/\(package)", directory.at(package)])
            try #require(copy.status == 0, "\(copy.output)")
            for folder in [".build", ".swiftpm"] { try? FileManager.default.removeItem(atPath: directory.at("\(package)/\(folder)")) }
        }
        let gap = directory.at("EventBusKit/Sources/EventBusKit/Event/Gap.swift")
        let original = try String(contentsOfFile: gap, encoding: .utf8)
        let anchor = "    public var lastSequence: UInt64\n"
        try #require(original.contains(anchor))
        try original.replacingOccurrences(of: anchor, with: anchor + "    /// Added by ChangedInterfaceTests: a new stored property changes the layout.\n    public var reason: String = \"\"\n")
            .write(toFile: gap, atomically: true, encoding: .utf8)

        let build = try await run(try swiftExecutable(), ["build", "--package-path", directory.at("hello"),
                                                          "--scratch-path", directory.at("hello/.build")])
        print("swift build of hello against a changed SDK: \(String(format: "%.1f", build.seconds)) s")
        try #require(build.status == 0, "swift build failed:\n\(build.output)")
        let library = directory.at("hello/.build/debug/libHello.so")
        try #require(FileManager.default.fileExists(atPath: library))

        // The loader: refused by the fingerprint (the file itself is a sound module).
        do {
            let loaded = try ModuleLoader().load(library)
            Issue.record("loaded \(loaded.resolvedPath)")
        } catch {
            #expect(error.kind == .abiMismatch, "\(error)")
            #expect(error.message.contains("built with another EventBusKit interface: the module was built with EventBusKit \(ModuleABI.release) (interface sha256:"), "\(error)")
            #expect(error.message.contains("this host runs EventBusKit \(ModuleABI.release) (interface \(ModuleABI.interfaceFingerprint)) and swift-"), "\(error)")
            #expect(!error.message.contains("the module was built with EventBusKit \(ModuleABI.release) (interface \(ModuleABI.interfaceFingerprint))"), "\(error)")
        }
        let changed = [UnsafeModule(name: "changed", path: library, kind: .abiMismatch,
                                    reason: "ABI mismatch: built with another EventBusKit interface")]
        try await RefusalScenarios.checkConfig(changed, in: directory)
        try await RefusalScenarios.atStart(changed, in: directory)
        try await RefusalScenarios.onReload(changed, in: directory)
    }
}
