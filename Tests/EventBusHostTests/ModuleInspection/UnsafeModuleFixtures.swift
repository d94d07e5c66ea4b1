import EventBusHost
import Foundation
import Testing

/// Module files the host must refuse, made for a test in its own folder: prefixes of a real
/// module, tiny C shared objects built with gcc (`.ci/setup` installs it), a real module patched
/// for another machine, and the `FixtureOwnOpenCombine` module the root package builds.
struct UnsafeModule: Sendable {
    /// The config key, and the file.
    var name: String
    var path: String
    var kind: ModuleLoadError.Kind
    /// A part of the refusal's message that names the reason.
    var reason: String
}

enum UnsafeModules {
    /// Builds `source` as `lib<name>.so` with gcc; linked against the SDK's `libEventBusKit.so`
    /// (as a module is) unless `linkSDK` is false. `extra` goes to gcc as it is.
    static func buildC(_ source: String, name: String, in directory: TemporaryDirectory,
                       linkSDK: Bool = true, extra: [String] = []) async throws -> String {
        let sourcePath = try directory.write("\(name).c", source)
        let output = directory.at("lib\(name).so")
        var arguments = ["-shared", "-fPIC", "-o", output, sourcePath]
        if linkSDK { arguments += ["-L", BuildProducts.directory, "-Wl,--no-as-needed", "-lEventBusKit"] }
        let result = try await run("/usr/bin/gcc", arguments + extra)
        try #require(result.status == 0, "gcc failed: \(result.output)")
        return output
    }

    /// The first `size` bytes of a real module, as `name.so`.
    static func prefix(of module: String, size: Int, name: String, in directory: TemporaryDirectory) throws -> String {
        let bytes = try Data(contentsOf: URL(fileURLWithPath: module))
        let path = directory.at("\(name).so")
        try bytes.prefix(size).write(to: URL(fileURLWithPath: path))
        return path
    }

    /// A C module whose `eventbus_module` returns `body` (a C expression of type `void *`),
    /// after `declarations`.
    static func entryReturning(_ body: String, declarations: String = "", name: String,
                               in directory: TemporaryDirectory) async throws -> String {
        try await buildC("""
            #include <string.h>
            \(declarations)
            void *eventbus_module(void) { return \(body); }
            """, name: name, in: directory)
    }

    /// One of each kind the issue names, for the daemon tests: a truncated module, a NULL entry,
    /// a module carrying its own OpenCombine, one for another machine.
    static func standardSet(in directory: TemporaryDirectory) async throws -> [UnsafeModule] {
        let counter = BuildProducts.fixture("FixtureCounter")
        var machine = try Data(contentsOf: URL(fileURLWithPath: counter))
        machine[18] = 183  // e_machine: AArch64
        machine[19] = 0
        let foreign = directory.at("libforeign.so")
        try machine.write(to: URL(fileURLWithPath: foreign))
        return [
            UnsafeModule(name: "truncated", path: try prefix(of: counter, size: 4096, name: "libtruncated", in: directory),
                         kind: .truncated, reason: "truncated or damaged: program header"),
            UnsafeModule(name: "nullentry", path: try await entryReturning("0", name: "nullentry", in: directory),
                         kind: .badEntryRecord, reason: "its eventbus_module returned NULL"),
            UnsafeModule(name: "owncopy", path: BuildProducts.fixture("FixtureOwnOpenCombine"),
                         kind: .duplicateSDK, reason: "duplicate SDK: it carries its own copy of OpenCombine"),
            UnsafeModule(name: "foreign", path: foreign,
                         kind: .wrongPlatform, reason: "built for AArch64 (ELF 64-bit little-endian)"),
        ]
    }
}
