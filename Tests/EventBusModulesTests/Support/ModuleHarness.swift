import EventBusKit
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Where `swift build` put the products this test bundle was built with: the folder of the
/// running test executable (`.build/debug/EventBusPackageTests.xctest`), so the tests use the
/// modules and the CLI of the same build whatever its `--scratch-path`.
enum BuildProducts {
    static let folder: URL = {
        let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        return URL(fileURLWithPath: executable).deletingLastPathComponent()
    }()

    /// The scratch folder of this build (`.build`, or what `--scratch-path` named): two levels
    /// above `x86_64-unknown-linux-gnu/debug`.
    static var scratch: URL { folder.deletingLastPathComponent().deletingLastPathComponent() }

    static func library(_ target: String) -> String { folder.appendingPathComponent("lib\(target).so").path }
    static var cli: String { folder.appendingPathComponent("eventbus").path }

    /// The repository checkout this file is in (`Tests/EventBusModulesTests/Support/…`).
    static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
}

/// Loads a module the way the host does: `dlopen` with `RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE`,
/// the `eventbus_module` entry, and the SDK's checks of its export record. Never `dlclose`d
/// (docs/platform-facts.md, Loading modules: unloading would unmap conformance records the Swift runtime keeps).
func loadModuleFactory(at path: String) throws -> ModuleFactory {
    guard FileManager.default.fileExists(atPath: path) else {
        throw HarnessError("\(path) does not exist; build the root package first (swift build --build-tests)")
    }
    guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE) else {
        throw HarnessError("dlopen \(path): \(String(cString: dlerror()))")
    }
    guard let symbol = dlsym(handle, moduleEntrySymbol) else {
        throw HarnessError("\(path) has no \(moduleEntrySymbol) symbol")
    }
    typealias Entry = @convention(c) () -> UnsafeRawPointer
    return try ModuleFactory.open(record: unsafeBitCast(symbol, to: Entry.self)())
}

struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// One loaded module with what the host would give it: a bus, a mailbox, a context and a log.
/// The test talks to the module through the bus only, as other modules and people do.
final class ModuleHarness: @unchecked Sendable {
    let bus = Bus()
    let mailbox: Mailbox
    let context: ModuleContext
    let module: any EventBusModule
    /// Every line the module logged, as "level: message".
    let logs = Collected<[String]>([])

    init(library path: String, config: [String: ConfigValue] = [:], mailboxCapacity: Int = 10_000) throws {
        let factory = try loadModuleFactory(at: path)
        let made = factory.makeModule()
        module = made
        mailbox = Mailbox(label: "test.\(made.name)", capacity: mailboxCapacity)
        context = ModuleContext(bus: bus.scoped(to: mailbox), config: ModuleConfig(config, keys: factory.configKeys),
                                log: ModuleLog { [logs] level, message in logs.update { $0.append("\(level): \(message)") } })
    }

    /// Checks the section against the module's declaration and activates the module on its
    /// mailbox queue, as the host does, and throws either refusal.
    func activate() throws {
        let problems = context.config.keys.check(context.config.values)
        guard problems.isEmpty else {
            throw EventBusError(.invalidModuleConfig, problems.map(\.description).joined(separator: "; "))
        }
        let refusal = Collected<(any Error)?>(nil)
        mailbox.perform { [self] in
            do { try module.activate(context) } catch { refusal.update { $0 = error } }
        }
        guard mailbox.drain(timeout: patience) else { throw HarnessError("activate did not return") }
        if let error = refusal.value { throw error }
    }

    /// Deactivates the module and cancels its subscriptions on its queue, as the host does.
    func deactivate() {
        mailbox.perform { [self] in
            module.deactivate()
            for cancellable in context.cancellables { cancellable.cancel() }
            context.cancellables.removeAll()
        }
        _ = mailbox.drain(timeout: patience)
    }

    /// Collects, from now on, the events matching `pattern` that anyone posts — in the tests,
    /// what the module posts back.
    func record(_ pattern: String) throws -> Recorder {
        let recorder = Recorder()
        recorder.cancellable = try bus.publisher(for: pattern).sink { [recorder] event in
            recorder.events.update { $0.append(event) }
        }
        return recorder
    }

    func logged(_ fragment: String) -> Bool {
        logs.value.contains { $0.contains(fragment) }
    }
}

final class Recorder: @unchecked Sendable {
    let events = Collected<[Event]>([])
    var cancellable: AnyCancellable?

    var all: [Event] { events.value }
    var count: Int { events.value.count }
}

/// The checks that prove a module loaded into a process that has exactly one SDK: the instance
/// is the SDK's protocol type and what it posts reads back through the SDK's typed values.
func expectLoadedWithOneSDK(_ harness: ModuleHarness, name: String, type typeName: String) {
    let object = harness.module as AnyObject
    #expect(object is EventBusModule)
    #expect(String(reflecting: Swift.type(of: object)) == typeName)
    #expect(harness.module.name == name)
}
