import ControlProtocol
import Foundation
import Testing
import TestSupport

/// Another host's trouble is not this host's: notices imported through the bridge (a remote
/// `module.crashed`, or one a remote poster forged) stay out of `eventbus_notices_total`, and
/// imports are counted as `imported`, not under the source kind the remote host claims.
@Suite(.serialized, .enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.realDaemon, .nats), .skippable(.realDaemon, .nats))
struct BridgeMetricsOriginTests {
    @Test func importedNoticesAndEventsAreCountedApartFromThisHostsOwn() async throws {
        let directory = try TemporaryDirectory("bridge-metrics")
        let server = try NATSServer(storage: directory.path)
        defer { server.stop() }
        let a = try BridgedHost("alpha", server: server, in: directory, bridge: "export: [\">\"]")
        let b = try BridgedHost("beta", server: server, in: directory, bridge: "import: [\">\"]")
        try await a.start()
        try await b.start()
        func metrics() -> String { (try? ask(b.socket, ["op": "metrics"]))?["text"]?.stringValue ?? "" }
        func value(_ series: String) -> Double { sampleValue(metrics(), series) ?? -1 }

        let userBefore = value(#"eventbus_events_posted_total{source_kind="user"}"#)
        // Posted by a user of alpha: names any poster may use. Beta must not count them as its own.
        let forged = ["module.crashed", "module.failed", "fs.overflow"]  // bridge.gap is never exported
        try await Task.sleep(for: .milliseconds(200))  // beta's subscription is at the server
        for name in forged { _ = try ask(a.socket, ["op": "post", "name": .string(name), "fields": ["module": "db"]]) }
        #expect(await eventually { b.count("imported") == Int64(forged.count) }, "beta: \(b.bridgeStatus ?? .null)")
        #expect(await eventually { value(#"eventbus_events_posted_total{source_kind="imported"}"#) == Double(forged.count) },
                "\(metrics())")
        for name in forged {
            #expect(value(#"eventbus_notices_total{notice="\#(name)"}"#) == 0, "\(name) counted as beta's own")
            #expect(value(#"eventbus_imported_notices_total{notice="\#(name)"}"#) == 1)
        }
        #expect(value(#"eventbus_events_posted_total{source_kind="user"}"#) == userBefore)

        // Beta's own notice still counts as its own.
        _ = try ask(b.socket, ["op": "post", "name": "module.crashed", "fields": ["module": "local"]])
        #expect(await eventually { value(#"eventbus_notices_total{notice="module.crashed"}"#) == 1 })
        #expect(value(#"eventbus_imported_notices_total{notice="module.crashed"}"#) == 1)
        await a.kill(SIGTERM)
        await b.kill(SIGTERM)
    }
}
