import ControlProtocol
import EventBusHost
import EventBusKit
import Foundation
import ModuleLoading
import Testing

/// Every unsafe module file is refused with its reason before it is mapped — by the loader,
/// by `eventbusd --check-config`, at the start of a real eventbusd and on its SIGHUP reload —
/// and the host carries on. Before the preflight, each of these killed the host (SIGBUS inside
/// dlopen, SIGSEGV on a NULL record or in `activate`); a crash here fails the whole test run.
@Suite struct ModuleRefusalTests {
    func refusal(_ path: String, loader: ModuleLoader = ModuleLoader(),
                 sourceLocation: SourceLocation = #_sourceLocation) -> ModuleLoadError? {
        do {
            let library = try loader.load(path)
            Issue.record("\(path) loaded as \(library.resolvedPath)", sourceLocation: sourceLocation)
            return nil
        } catch {
            return error
        }
    }

    func expectRefused(_ path: String, _ kind: ModuleLoadError.Kind, _ reason: String,
                       sourceLocation: SourceLocation = #_sourceLocation) {
        let error = refusal(path, sourceLocation: sourceLocation)
        #expect(error?.kind == kind, "\(error.map(\.description) ?? "")", sourceLocation: sourceLocation)
        #expect(error?.message.contains(reason) == true, "\(error.map(\.description) ?? "")", sourceLocation: sourceLocation)
    }

    // MARK: The loader

    /// The issue's crash: a prefix of a real module (4096 bytes SIGBUSed the host in dlopen).
    @Test(arguments: ["FixtureCounter", "Hello"])
    func truncatedModulesAreRefusedBeforeDlopen(_ module: String) throws {
        let directory = try TemporaryDirectory()
        let path = BuildProducts.fixture(module)
        let size = Int(try FileManager.default.attributesOfItem(atPath: path)[.size] as! UInt64)
        // Every 256 bytes from 512 to 16 KiB (the issue's range), then larger cuts.
        for prefix in Array(stride(from: 512, through: 16384, by: 256)) + [1000, 6000, 65536, size / 2, size - 1] where prefix < size {
            let file = try UnsafeModules.prefix(of: path, size: prefix, name: "lib\(module)-\(prefix)", in: directory)
            expectRefused(file, .truncated, "truncated or damaged: ")
            expectRefused(file, .truncated, "but the file has only \(prefix) bytes")
        }
    }

    @Test func aModuleWithItsOwnOpenCombineIsRefused() {
        expectRefused(BuildProducts.fixture("FixtureOwnOpenCombine"), .duplicateSDK,
                      "duplicate SDK: it carries its own copy of OpenCombine: it defines OpenCombine's types itself ($s11OpenCombine")
        expectRefused(BuildProducts.fixture("FixtureOwnOpenCombine"), .duplicateSDK,
                      "Depend only on the EventBusKit product, never on OpenCombine directly")
    }

    @Test func aModuleForAnotherMachineIsRefused() async throws {
        let directory = try TemporaryDirectory()
        let foreign = try await UnsafeModules.standardSet(in: directory).first { $0.name == "foreign" }!
        expectRefused(foreign.path, .wrongPlatform, "built for AArch64 (ELF 64-bit little-endian), this host is x86-64")
    }

    @Test func anExecutableIsNotALibrary() {
        expectRefused(BuildProducts.eventbusd, .notSharedLibrary, "a position-independent executable, not a shared library")
    }

    @Test func aCLibraryWithoutTheSDKIsRefused() async throws {
        let directory = try TemporaryDirectory()
        let path = try await UnsafeModules.buildC("void *eventbus_module(void) { return 0; }", name: "nosdk",
                                                  in: directory, linkSDK: false)
        expectRefused(path, .notLinkedToSDK, "it does not link libEventBusKit.so (its DT_NEEDED: ")
    }

    /// A library the dynamic loader itself refuses (a dependency that is gone) still gets the
    /// loader's message: the preflight does not replace dlopen's own checks.
    @Test func aMissingDependencyIsTheLoadersRefusal() async throws {
        let directory = try TemporaryDirectory()
        let dependency = try await UnsafeModules.buildC("int gone(void) { return 1; }", name: "gonedep", in: directory, linkSDK: false)
        let path = try await UnsafeModules.buildC("int gone(void); void *eventbus_module(void) { return (void *)(long)gone(); }",
                                                  name: "needsgone", in: directory,
                                                  extra: ["-L", directory.path, "-lgonedep"])
        try FileManager.default.removeItem(atPath: dependency)
        expectRefused(path, .loaderRefused, "the dynamic loader refused it: libgonedep.so: cannot open shared object file")
    }

    /// What an entry may return instead of an export record: each is refused by name, none is
    /// dereferenced blindly.
    @Test func malformedEntryRecordsAreRefused() async throws {
        let directory = try TemporaryDirectory()
        let tag = ModuleABI.buildTag
        let cases: [(name: String, declarations: String, body: String, reason: String)] = [
            ("null", "", "0", "NULL;"),
            ("unmapped", "", "(void *)0x10", "a pointer to unreadable memory (0x10)"),
            ("misaligned", "static char record[64];", "record + 1", "a misaligned pointer"),
            ("nulltag", "static void *record[2] = {0, 0};", "record", "a record whose tag is NULL"),
            ("unmappedtag", "static void *record[2] = {(void *)0x1000, 0};", "record",
             "a record whose tag is not a C string of at most 256 bytes in readable memory"),
            ("longtag", "static char tag[4096]; static void *record[2];",
             "(memset(tag, 'a', sizeof tag - 1), record[0] = tag, record)",
             "a record whose tag is not a C string of at most 256 bytes"),
            ("binarytag", "static char tag[] = {1, 2, 3, 0}; static void *record[2] = {tag, 0};", "record",
             "a record whose tag is not printable text"),
            ("nullfactory", "static void *record[2] = {\"\(tag)\", 0};", "record", "a record whose factory is NULL"),
            ("badfactory", "static void *record[2] = {\"\(tag)\", (void *)0x20};", "record",
             "a record whose factory points at unreadable memory (0x20)"),
        ]
        for entry in cases {
            let path = try await UnsafeModules.entryReturning(entry.body, declarations: entry.declarations,
                                                              name: "record\(entry.name)", in: directory)
            let error = refusal(path)
            #expect(error?.kind == .badEntryRecord, "\(entry.name): \(error.map(\.description) ?? "")")
            #expect(error?.message.contains("its eventbus_module returned \(entry.reason)") == true,
                    "\(entry.name): \(error.map(\.description) ?? "")")
        }
        // A record for another SDK is refused by its tag; its factory word is never read.
        let other = try await UnsafeModules.entryReturning(
            "record", declarations: "static void *record[2] = {\"sha256:0000 swift-6.3.0\", (void *)0x20};",
            name: "recordothersdk", in: directory)
        let error = refusal(other)
        #expect(error?.kind == .abiMismatch)
        #expect(error?.message.contains("built with another EventBusKit interface") == true, "\(error.map(\.description) ?? "")")
    }

    // MARK: The fingerprint

    /// The fingerprint is SHA-256 over the SDK's sources and manifest, framed as the generator
    /// documents: recomputed here from the repository's files with coreutils' `sha256sum`.
    @Test func theInterfaceFingerprintIsTheSHA256OfTheSDKSources() async throws {
        let sdk = BuildProducts.repository + "/plugins/EventBusKit"
        var files = ["Package.swift"]
        let sources = FileManager.default.enumerator(atPath: sdk + "/Sources/EventBusKit")!
        while let file = sources.nextObject() as? String {
            if file.hasSuffix(".swift") { files.append("Sources/EventBusKit/" + file) }
        }
        files.sort { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }
        var stream = Data()
        for file in files {
            let contents = try Data(contentsOf: URL(fileURLWithPath: sdk + "/" + file))
            stream += Data(file.utf8) + [0] + Data(String(contents.count).utf8) + [0] + contents
        }
        let directory = try TemporaryDirectory()
        let framed = directory.at("framed")
        try stream.write(to: URL(fileURLWithPath: framed))
        let sum = try await run("/usr/bin/sha256sum", [framed])
        let digest = try #require(sum.output.split(separator: " ").first)
        #expect(ModuleABI.interfaceFingerprint == "sha256:\(digest)")
        #expect(ModuleABI.buildTag.hasPrefix(ModuleABI.interfaceFingerprint + " swift-"))
        #expect(ModuleABI.buildTag.hasSuffix(" eventbuskit-\(ControlProtocol.release)"), "the SDK's release is eventbusd's")
    }

    // MARK: eventbusd

    @Test func checkConfigRefusesEachWithItsReason() async throws {
        let directory = try TemporaryDirectory()
        try await RefusalScenarios.checkConfig(try await UnsafeModules.standardSet(in: directory), in: directory)
    }

    @Test func aStartingHostRefusesEachAndRunsTheRest() async throws {
        let directory = try TemporaryDirectory()
        try await RefusalScenarios.atStart(try await UnsafeModules.standardSet(in: directory), in: directory)
    }

    @Test func aReloadRefusesEachAndTheHostStaysUp() async throws {
        let directory = try TemporaryDirectory()
        try await RefusalScenarios.onReload(try await UnsafeModules.standardSet(in: directory), in: directory)
    }
}
