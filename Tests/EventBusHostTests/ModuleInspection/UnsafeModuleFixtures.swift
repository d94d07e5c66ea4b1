import ControlProtocol
import EventBusHost
import Foundation
import ModuleLoading
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

    /// A C module whose ELF constructor runs `body` (C statements; `<unistd.h>` is included):
    /// `dlopen` runs it before the loader sees the entry, and the preflight cannot see what it
    /// does — the file links the SDK and exports `eventbus_module` (which returns NULL, never
    /// reached when `body` does not return).
    static func constructing(_ body: String, name: String, in directory: TemporaryDirectory) async throws -> String {
        try await buildC("""
            #include <unistd.h>
            __attribute__((constructor)) static void on_load(void) { \(body) }
            void *eventbus_module(void) { return 0; }
            """, name: name, in: directory)
    }

    /// Its load kills the process that loads it: a write through a null pointer (SIGSEGV).
    static func crashingOnLoad(in directory: TemporaryDirectory) async throws -> String {
        try await constructing("*(volatile int *)0 = 1;", name: "crashonload", in: directory)
    }

    /// Its load never returns.
    static func hangingOnLoad(in directory: TemporaryDirectory) async throws -> String {
        try await constructing("for (;;) sleep(1);", name: "hangonload", in: directory)
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

/// The three ways a host meets a module file, each with a real eventbusd: `--check-config`, the
/// start of a host, and a SIGHUP reload of a running one. Every unsafe module must be refused with
/// its reason (in the output, the log and `eventbus modules`) while a good module beside it keeps
/// receiving events.
enum RefusalScenarios {
    static func checkConfig(_ unsafe: [UnsafeModule], in directory: TemporaryDirectory) async throws {
        let config = try directory.write("check.yaml", "modules:\n  counter:\n    path: \(BuildProducts.fixture("FixtureCounter"))\n"
            + unsafe.map { "  \($0.name):\n    path: \($0.path)\n" }.joined())
        let check = try DaemonProcessTests.Daemon(arguments: ["--check-config", "--config", config], in: directory)
        #expect(await check.exitStatus() == 1, "\(check.output)")
        let output = check.output
        #expect(output.contains("module counter: loads, ABI ok"), "\(output)")
        for module in unsafe {
            let line = output.split(separator: "\n").first { $0.contains("module \(module.name): ") }
            #expect(line?.contains("cannot load module \(module.path): \(module.reason)") == true, "\(line ?? "no line") in \(output)")
        }
        #expect(output.contains("\(unsafe.count) problem(s) found"))
    }

    static func atStart(_ unsafe: [UnsafeModule], in directory: TemporaryDirectory) async throws {
        let socket = directory.at("control.sock")
        let daemon = try await DaemonProcessTests.Daemon.running("""
            control: {socket: \(socket)}
            modules:
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
                config: {pattern: "user.>"}
            \(unsafe.map { "  \($0.name):\n    path: \($0.path)\n" }.joined())
            """, in: directory)
        try await expectRefusedAndCounterAlive(unsafe, daemon: daemon, socket: socket, posted: 3, in: directory)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    static func onReload(_ unsafe: [UnsafeModule], in directory: TemporaryDirectory) async throws {
        let socket = directory.at("control.sock")
        let base = """
            control: {socket: \(socket)}
            modules:
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
                config: {pattern: "user.>"}

            """
        let daemon = try await DaemonProcessTests.Daemon.running(base, in: directory)
        try postMany(socket, name: "user.before", count: 2)
        try directory.write("eventbus.yaml", base + unsafe.map { "  \($0.name):\n    path: \($0.path)\n" }.joined())
        daemon.signal(SIGHUP)
        // A reload applies as a whole or not at all: refused, with each module's reason, and
        // nothing changes — the unsafe modules are not added, the counter runs on.
        #expect(await daemon.waitFor("nothing was changed, the running config stays"), "\(daemon.output)")
        for module in unsafe {
            #expect(await daemon.waitFor("cannot load module \(module.path): \(module.reason)"), "\(daemon.output)")
        }
        let listed = try JSON.parse(try await eventbus(["modules", "--socket", socket, "--json"], in: directory).stdout)
        #expect(listed["modules"]?.arrayValue?.compactMap { $0["name"]?.stringValue } == ["counter"], "\(listed)")
        try postMany(socket, name: "user.after", count: 3)
        #expect(await eventually {
            let counter = (try? ask(socket, ["op": "modules"]))?["modules"]?.arrayValue?.first { $0["name"] == "counter" }
            return (counter?["delivered"]?.intValue ?? 0) >= 5
        }, "\(daemon.output)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// Each unsafe module is logged and listed by `eventbus modules` as failed with its reason,
    /// and the counter module still receives what is posted (3 more events).
    private static func expectRefusedAndCounterAlive(_ unsafe: [UnsafeModule], daemon: DaemonProcessTests.Daemon,
                                                     socket: String, posted total: Int, in directory: TemporaryDirectory) async throws {
        for module in unsafe {
            #expect(await daemon.waitFor("modules.\(module.name): cannot load module \(module.path): \(module.reason)"),
                    "\(daemon.output)")
        }
        let listed = try await eventbus(["modules", "--socket", socket, "--json"], in: directory)
        #expect(listed.status == 0, "\(listed.stderr)")
        let modules = try JSON.parse(listed.stdout)["modules"]?.arrayValue ?? []
        for module in unsafe {
            let entry = modules.first { $0["name"]?.stringValue == module.name }
            #expect(entry?["state"] == "failed", "\(listed.stdout)")
            #expect(entry?["reason"]?.stringValue?.contains(module.reason) == true, "\(listed.stdout)")
        }
        #expect(modules.first { $0["name"] == "counter" }?["state"] == "active", "\(listed.stdout)")
        let table = try await eventbus(["modules", "--socket", socket], in: directory)
        for module in unsafe { #expect(table.stdout.contains("└ cannot load module \(module.path): \(module.reason)"), "\(table.stdout)") }
        try postMany(socket, name: "user.after", count: 3)
        #expect(await eventually {
            let counter = (try? ask(socket, ["op": "modules"]))?["modules"]?.arrayValue?.first { $0["name"] == "counter" }
            return (counter?["delivered"]?.intValue ?? 0) >= Int64(total)
        }, "\(daemon.output)")
    }
}
