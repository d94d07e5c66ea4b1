// swift-tools-version:6.0
import Foundation
import PackageDescription

/// Each source kind's folder under Sources/EventSources holds its README.md and sample.yaml
/// beside its code (docs/adding-a-source.md): found here, so a new folder needs no line below.
let sourceKindDocuments: [String] = {
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Sources/EventSources")
    let folders = (try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []
    return folders.sorted().flatMap { folder in
        ["README.md", "sample.yaml"].map { "\(folder)/\($0)" }
            .filter { FileManager.default.fileExists(atPath: root.appendingPathComponent($0).path) }
    }
}()

let package = Package(
    name: "EventBus",
    products: [
        .executable(name: "eventbus-bench", targets: ["eventbus-bench"]),
        .executable(name: "eventbus", targets: ["eventbus"]),
        // The example handler modules, built here as well as by their own packages in plugins/
        // (route 2 of docs/platform-facts.md, Loading modules: they share this build and link the one libEventBusKit.so).
        .library(name: "Hello", type: .dynamic, targets: ["Hello"]),
        .library(name: "Follower", type: .dynamic, targets: ["Follower"]),
        .library(name: "RateSummary", type: .dynamic, targets: ["RateSummary"]),
        .library(name: "UnitAlerts", type: .dynamic, targets: ["UnitAlerts"]),
        .executable(name: "eventbusd", targets: ["eventbusd"]),
        // Root's helper that starts rules' commands as transient units for an unprivileged eventbusd.
        .executable(name: "eventbus-rule-runner", targets: ["RuleRunner"]),
        // Runs one process-isolated module (`isolation: process`); eventbusd spawns it.
        .executable(name: "eventbus-module-worker", targets: ["ModuleWorker"]),
        // Test fixtures: real module shared objects for EventBusHostTests to load.
        .library(name: "FixtureCounter", type: .dynamic, targets: ["FixtureCounter"]),
        .library(name: "FixtureStalled", type: .dynamic, targets: ["FixtureStalled"]),
        .library(name: "FixtureActivationThrows", type: .dynamic, targets: ["FixtureActivationThrows"]),
        .library(name: "FixtureThrowingHandler", type: .dynamic, targets: ["FixtureThrowingHandler"]),
        .library(name: "FixtureABIMismatch", type: .dynamic, targets: ["FixtureABIMismatch"]),
        .library(name: "FixtureOwnOpenCombine", type: .dynamic, targets: ["FixtureOwnOpenCombine"]),
        .library(name: "FixtureCrashing", type: .dynamic, targets: ["FixtureCrashing"]),
        .library(name: "FixtureHanging", type: .dynamic, targets: ["FixtureHanging"]),
        .library(name: "FixtureLatencyProbe", type: .dynamic, targets: ["FixtureLatencyProbe"]),
        .library(name: "FixtureJournalAck", type: .dynamic, targets: ["FixtureJournalAck"]),
        .library(name: "FixtureDevices", type: .dynamic, targets: ["FixtureDevices"]),
    ],
    dependencies: [
        // The SDK is a nested package so SwiftPM links everything here against its one dynamic
        // library instead of static copies (docs/platform-facts.md, Loading modules).
        .package(path: "plugins/EventBusKit"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        // Only for the FixtureOwnOpenCombine test module (a module carrying its own copy, which
        // the host must refuse); the same exact version the SDK pins, so nothing else changes.
        .package(url: "https://github.com/OpenCombine/OpenCombine", exact: "0.14.0"),
        // Metrics: the Prometheus registry and text format (no SwiftNIO — the host serves
        // /metrics itself). Not the swift-metrics API: what the host counts it keeps itself and
        // sets into the registry at scrape time, and modules run in worker processes, where a
        // metrics backend bootstrapped in eventbusd would not see them.
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        // Rules' commands as child processes (process group, teardown) when systemd cannot run them.
        .package(url: "https://github.com/swiftlang/swift-subprocess", from: "1.0.2"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        // Rules' webhooks: HTTP/1.1 and TLS, pooled connections, per-request deadlines
        // (Sources/WebhookOutbox/README.md). SwiftNIO comes with it; named for its types.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.0"),
    ],
    targets: [
        .executableTarget(
            name: "eventbus-bench",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit"), "EventSources",
                           "EventBusHost", "ControlProtocol", "ModuleIsolation", "NATSBridge", "EventFieldCoding", "CNATS",
                           "EventBusMetrics", "SystemCalls", "WebhookOutbox", "SystemdBus",
                           .product(name: "NIOCore", package: "swift-nio"),
                           .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "NIOHTTP1", package: "swift-nio"),
                           .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                           .product(name: "Logging", package: "swift-log")]
        ),
        // What a rule's command is and how it runs: the launcher protocol and its child-process
        // launcher (swift-subprocess), for the host's rules (docs/rules.md).
        .target(
            name: "RuleActions",
            dependencies: ["SystemCalls", .product(name: "Subprocess", package: "swift-subprocess"),
                           .product(name: "SystemPackage", package: "swift-system")]
        ),
        // A rule's webhooks: the durable outbox in the state directory and their delivery with
        // retries (Sources/WebhookOutbox/README.md).
        .target(
            name: "WebhookOutbox",
            dependencies: [.product(name: "AsyncHTTPClient", package: "async-http-client"),
                           .product(name: "NIOCore", package: "swift-nio"),
                           .product(name: "NIOPosix", package: "swift-nio"),
                           .product(name: "NIOHTTP1", package: "swift-nio"),
                           .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                           .product(name: "Logging", package: "swift-log"), "SystemCalls"],
            exclude: ["README.md"]
        ),
        // Enqueues webhook deliveries into an outbox folder and waits to be SIGKILLed: the
        // durability tests' first life.
        .executableTarget(
            name: "webhook-outbox-fixture",
            dependencies: ["WebhookOutbox", .product(name: "Logging", package: "swift-log")],
            path: "Tests/Fixtures/WebhookOutboxFixture"
        ),
        // The control socket's wire format (JSON lines) and a client connection: shared by the
        // host and the eventbus CLI, which links neither the SDK nor the host.
        .target(name: "ControlProtocol", dependencies: ["SystemCalls"], exclude: ["PROTOCOL.md", "EXEC-PROTOCOL.md"]),
        // The OS boundary: libc calls wrapped as Swift values and one error type, and the fatal
        // signal handling every process that runs module code installs. Depends on libc only.
        .target(name: "SystemCalls", dependencies: ["CEpoll"]),
        // What loading and running a module needs and no more, shared by eventbusd and the module
        // worker: file trust, the ELF preflight, dlopen, the entry and its SDK ABI check.
        .target(
            name: "ModuleLoading",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit"), "SystemCalls"]
        ),
        // libsystemd: sd-journal for the journal source, sd-bus for the units source.
        .systemLibrary(
            name: "CSystemd",
            pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]
        ),
        // epoll and eventfd for the control socket's event loop (headers only, part of glibc).
        .systemLibrary(name: "CEpoll", path: "Sources/CEpoll"),
        // malloc_trim, to give freed heap back after large buffers (header only, part of glibc).
        .systemLibrary(name: "CMalloc", path: "Sources/CMalloc"),
        // nats.c (libnats-dev): core NATS and JetStream, for the bridge.
        .systemLibrary(
            name: "CNATS",
            pkgConfig: "libnats",
            providers: [.apt(["libnats-dev"])]
        ),
        // Bridges the bus of this host to other hosts through NATS (core or JetStream).
        .target(
            name: "NATSBridge",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit"), "EventFieldCoding", "CNATS", "SystemCalls",
                           .product(name: "Logging", package: "swift-log")]
        ),
        // Prometheus metrics: the registry and its text, handler-duration histograms, process
        // figures and the small HTTP/1.1 listener that serves `/metrics` (docs/metrics.md).
        .target(
            name: "EventBusMetrics",
            dependencies: [.product(name: "Prometheus", package: "swift-prometheus"), "SystemCalls"]
        ),
        // The host's built-in sources that talk to the OS: journal (sd-journal), files (inotify), devices
        // (sd-device), units and D-Bus signals (sd-bus).
        .target(
            name: "EventSources",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit"), "CSystemd", "SystemCalls", "SystemdBus", "ConfigText"],
            exclude: sourceKindDocuments
        ),
        // sd-bus for talking to systemd: one connection, message reading and writing, unit object
        // paths; shared by the units source and the transient-unit launcher.
        .target(name: "SystemdBus", dependencies: ["CSystemd", "SystemCalls"]),
        // The host's config text: YAML nodes that know their file and line, the errors that name
        // them, durations and sizes as people write them. Shared by the host's config and each
        // source kind's section parser.
        .target(name: "ConfigText", dependencies: [.product(name: "EventBusKit", package: "EventBusKit"),
                                                   .product(name: "Yams", package: "Yams")]),
        // Rules' commands as transient systemd units (StartTransientUnit), for the host's rules.
        .target(name: "TransientUnits", dependencies: ["RuleActions", "SystemdBus", "CSystemd", "SystemCalls"]),
        // The rule runner's protocol (JSON lines over its Unix socket) and its client launcher:
        // eventbusd asks root's helper to run one action of one rule (docs/rules-privileges.md).
        .target(name: "RuleRunnerProtocol", dependencies: ["ControlProtocol", "RuleActions"]),
        // eventbus-rule-runner: root, socket-activated, one connection per run; reads the rules
        // from the root-owned config and runs them through TransientUnitLauncher.
        .executableTarget(
            name: "RuleRunner",
            dependencies: ["EventBusHost", "RuleRunnerProtocol", "TransientUnits", "RuleActions", "ControlProtocol",
                           .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),
        // Runs one command through TransientUnitLauncher and prints what happened as JSON lines:
        // ProductionTests install it into the container and drive it as root and as eventbus.
        .executableTarget(
            name: "transient-unit-probe",
            dependencies: ["TransientUnits", "RuleActions"],
            path: "Tests/Fixtures/TransientUnitProbe"
        ),
        // A journal consumer with a persisted position, which the resume tests SIGKILL and restart.
        .executableTarget(
            name: "journal-consumer-fixture",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit"), "EventSources"],
            path: "Tests/Fixtures/JournalConsumerFixture"
        ),
        // Runs an operator misuse that must trap (requesting .none from a combineLatest), as a
        // child process of the operator tests.
        .executableTarget(
            name: "operator-trap-fixture",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/OperatorTrapFixture"
        ),
        .executableTarget(
            name: "eventbus",
            dependencies: [.product(name: "ArgumentParser", package: "swift-argument-parser"), "ControlProtocol", "SystemCalls"]
        ),
        .target(
            name: "Hello",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "plugins/hello/Sources/Hello"
        ),
        .target(
            name: "Follower",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "plugins/follower/Sources/Follower"
        ),
        .target(
            name: "RateSummary",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "plugins/rate-summary/Sources/RateSummary"
        ),
        .target(
            name: "UnitAlerts",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "plugins/unit-alerts/Sources/UnitAlerts"
        ),
        // The host: config, module loader and registry, lifecycle. Links the SDK dynamically
        // and never OpenCombine itself (docs/platform-facts.md, Loading modules).
        .target(
            name: "EventBusHost",
            dependencies: [
                .product(name: "EventBusKit", package: "EventBusKit"),
                "EventSources",
                "ConfigText",
                "NATSBridge",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Yams", package: "Yams"),
                "ControlProtocol",
                "CEpoll",
                "CMalloc",
                "ModuleIsolation",
                "ModuleLoading",
                "SystemCalls",
                "EventBusMetrics",
                "RuleActions",
                "RuleRunnerProtocol",
                "TransientUnits",
                "WebhookOutbox",
            ]
        ),
        // Process isolation, both sides' shared part and the host's: the wire format, spawning a
        // worker, supervising it (heartbeat, crash, restart). Links the SDK only.
        .target(
            name: "ModuleIsolation",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit"), "EventFieldCoding", "ControlProtocol", "SystemCalls"]
        ),
        // The binary encoding of an event's fields outside a process: the NATS payload and the
        // module worker's frames (docs/fleet.md, docs/modules.md).
        .target(name: "EventFieldCoding", dependencies: [.product(name: "EventBusKit", package: "EventBusKit")]),
        // The module worker: one module, in a process of its own, loaded with the host's loader.
        // Links what loading and running a module needs, not the host (no NATS, no libsystemd).
        .executableTarget(
            name: "ModuleWorker",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit"), "ModuleLoading",
                           "ModuleIsolation", "ControlProtocol", "SystemCalls"]
        ),
        .executableTarget(
            name: "eventbusd",
            dependencies: [
                "EventBusHost",
                "SystemCalls",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .target(
            name: "FixtureCounter",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/FixtureCounter"
        ),
        .target(
            name: "FixtureStalled",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/FixtureStalled"
        ),
        .target(
            name: "FixtureActivationThrows",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/FixtureActivationThrows"
        ),
        .target(
            name: "FixtureThrowingHandler",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/FixtureThrowingHandler"
        ),
        .target(
            name: "FixtureABIMismatch",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/FixtureABIMismatch"
        ),
        // Links OpenCombine a second time, as a module that depends on it directly does.
        .target(
            name: "FixtureOwnOpenCombine",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit"),
                           .product(name: "OpenCombine", package: "OpenCombine")],
            path: "Tests/Fixtures/FixtureOwnOpenCombine"
        ),
        .target(
            name: "FixtureCrashing",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/FixtureCrashing"
        ),
        .target(
            name: "FixtureHanging",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/FixtureHanging"
        ),
        .target(
            name: "FixtureLatencyProbe",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/FixtureLatencyProbe"
        ),
        .target(
            name: "FixtureJournalAck",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/FixtureJournalAck"
        ),
        .target(
            name: "FixtureDevices",
            dependencies: [.product(name: "EventBusKit", package: "EventBusKit")],
            path: "Tests/Fixtures/FixtureDevices"
        ),
        // What every test target shares: polling with a generous bound, a thread-safe box.
        .target(name: "TestSupport", path: "Tests/Support"),
        .testTarget(
            name: "EventBusKitTests",
            dependencies: ["TestSupport", .product(name: "EventBusKit", package: "EventBusKit")]
        ),
        // Loads the built example modules with dlopen, as the host does, and builds a module
        // package and a scaffold the way an outside author would.
        .testTarget(
            name: "EventBusModulesTests",
            dependencies: ["TestSupport", .product(name: "EventBusKit", package: "EventBusKit"), "EventSources"]
        ),
        // Config, loader, registry and lifecycle of the host, with real .so fixtures (built as the
        // Fixture* products above) and the real eventbusd as a child process.
        .testTarget(
            name: "EventBusHostTests",
            dependencies: ["TestSupport", "EventBusHost", "ControlProtocol", "ModuleIsolation", "ModuleLoading",
                           "SystemCalls", "EventBusMetrics", "EventFieldCoding", .product(name: "InMemoryLogging", package: "swift-log")]
        ),
        // The OS boundary against the real kernel: EINTR from real signals, real errno values.
        .testTarget(
            name: "SystemCallsTests",
            dependencies: ["TestSupport", "SystemCalls"]
        ),
        // The NATS bridge in-process against a real nats-server: the wire format keeps every field
        // type, origins, echoes. (The bridge between real eventbusd processes is tested in
        // EventBusHostTests.)
        .testTarget(
            name: "NATSBridgeTests",
            dependencies: ["TestSupport", "NATSBridge", "EventFieldCoding", "CNATS", .product(name: "EventBusKit", package: "EventBusKit"),
                           .product(name: "Logging", package: "swift-log")]
        ),
        // The webhook outbox against a real HTTP receiver (a Python script, Tests/Fixtures/webhook-receiver)
        // and a real SIGKILL of a process that enqueued.
        .testTarget(
            name: "WebhookOutboxTests",
            dependencies: ["TestSupport", "WebhookOutbox", .product(name: "Logging", package: "swift-log"),
                           .product(name: "InMemoryLogging", package: "swift-log")]
        ),
        // The built-in sources against the real OS: a private journald, real inotify.
        .testTarget(
            name: "EventSourcesTests",
            dependencies: ["TestSupport", .product(name: "EventBusKit", package: "EventBusKit"), "EventSources", "SystemdBus", "SystemCalls"]
        ),
        // The transient-unit launcher without systemd: the unit property table, `check`, the
        // refusals. (Against a real systemd: ProductionTests' TransientUnits.)
        .testTarget(
            name: "TransientUnitsTests",
            dependencies: ["TestSupport", "TransientUnits", "RuleActions", "SystemdBus"]
        ),
        // The rule runner's protocol, session and client without systemd: hostile lines, unknown
        // rules, the client against a runner's answers over a real socket. (Against a real
        // systemd: ProductionTests' RuleRunner.)
        .testTarget(
            name: "RuleRunnerTests",
            dependencies: ["TestSupport", "RuleRunnerProtocol", "EventBusHost", "RuleActions", "ControlProtocol",
                           .product(name: "EventBusKit", package: "EventBusKit")]
        ),
        // The .deb under a real systemd: a Debian 12 root made by debootstrap (cached in the build
        // folder), booted per test with systemd-nspawn (docs/production-tests.md). Runs the
        // products of this build, so it depends on no target of its own but the test support.
        .testTarget(
            name: "ProductionTests",
            dependencies: ["TestSupport"]
        ),
    ]
)
