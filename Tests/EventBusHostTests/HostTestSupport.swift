@_exported import TestSupport  // eventually, Collected: shared by every test target
import EventBusHost
import EventBusKit
import Foundation
import InMemoryLogging
import Logging
import Synchronization



/// The built fixture modules and executables: next to the test bundle in the build folder
/// (`.build*/<triple>/<config>/`), found from the running test executable.
enum BuildProducts {
    static let directory: String = {
        var candidates: [String] = []
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            candidates.append((exe as NSString).deletingLastPathComponent)
        }
        candidates.append(Bundle.main.bundlePath)
        candidates.append(((CommandLine.arguments.first ?? "") as NSString).deletingLastPathComponent)
        for directory in candidates {
            var current = directory
            // The bundle may be a folder inside the build folder; look a few levels up.
            for _ in 0..<4 {
                if FileManager.default.fileExists(atPath: current + "/libFixtureCounter.so") { return current }
                current = (current as NSString).deletingLastPathComponent
            }
        }
        fatalError("fixture modules not found near \(candidates); build with swift build --build-tests first")
    }()

    static func fixture(_ name: String) -> String { directory + "/lib\(name).so" }
    /// The repository checkout this file is in (`Tests/EventBusHostTests/HostTestSupport.swift`).
    static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static var eventbusd: String { directory + "/eventbusd" }
}

/// A logger whose messages the test can read back: swift-log's in-memory handler, at every level.
func recordingLogger() -> (Logger, InMemoryLogHandler) {
    var handler = InMemoryLogHandler()
    handler.logLevel = .trace
    return (Logger(label: "test") { _ in handler }, handler)
}

extension InMemoryLogHandler.Entry {
    var text: String { message.description }
    /// The module a host's message is about (its `module` metadata).
    var module: String? { metadata["module"].map { "\($0)" } }
}

/// Collects the events of `pattern` on `bus` (on the bus's delivery loop), for the test to wait on.
final class EventCollector: @unchecked Sendable {
    let events = Collected<[Event]>([])
    private var subscription: AnyCancellable?

    init(_ bus: Bus, _ pattern: String) throws {
        let events = events
        subscription = try bus.publisher(for: pattern).sink { event in events.update { $0.append(event) } }
    }

    func first(timeout: Duration = patience) async -> Event? {
        _ = await eventually(timeout: timeout) { !events.value.isEmpty }
        return events.value.first
    }
}

