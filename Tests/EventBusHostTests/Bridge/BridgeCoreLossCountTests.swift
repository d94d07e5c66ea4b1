import ControlProtocol
import Foundation
import Testing
import TestSupport

/// Core mode is at-most-once; what it loses is counted: each export carries its number among
/// its origin's exports of its name, and an importer announces the exports it missed
/// (`bridge.gap` of kind `missed`, per origin) and counts them in `lost` and `missed`.
@Suite(.serialized, .enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.realDaemon, .nats), .skippable(.realDaemon, .nats))
struct BridgeCoreLossCountTests {
    /// alpha exports a steady stream to beta through one nats-server, which is SIGKILLed and
    /// started again on its port a second later. alpha comes back at once (100 ms waits), beta
    /// seconds later (`reconnect_wait: 6s`): what alpha published in between never reached beta.
    /// Asserted: the exports beta announced as missed are exactly the ones it did not receive.
    @Test func anOutageCostsBetaExactlyWhatItAnnounces() async throws {
        let directory = try TemporaryDirectory("bridge-core-loss")
        var server = try NATSServer(storage: directory.path)
        let a = try BridgedHost("alpha", server: server, in: directory, bridge: """
            export: ["load.>"]
            reconnect_wait: 100ms
            max_reconnect_wait: 200ms
            """)
        let b = try BridgedHost("beta", server: server, in: directory, bridge: """
            import: ["load.>"]
            reconnect_wait: 6s
            max_reconnect_wait: 6s
            """, control: BridgedHost.wholeLifeControl)
        try await a.start()
        try await b.start()
        let tail = try TailCollector(b.socket, ["load.>", "bridge.gap"])
        // alpha is posted to from a thread of its own, 10 events every 20 ms.
        let poster = BackgroundPoster(a.socket, "load.tick", batch: 10, every: .milliseconds(20))
        #expect(await eventually { tail.named("load.").count >= 100 }, "\(b.health)")
        let port = server.port
        server.sigkill()
        try await Task.sleep(for: .seconds(1))
        server = try NATSServer(storage: directory.path, port: port)
        // Both back, and beta receiving again: then the stream's end.
        #expect(await eventually { b.count("reconnects") >= 1 && a.count("reconnects") >= 1 }, "\(a.health)\n\(b.health)")
        let atReconnect = poster.posted
        #expect(await eventually { (tail.named("load.").last?["fields"]?["n"]?.intValue ?? 0) > Int64(atReconnect) }, "\(b.health)")
        let total = poster.stop()
        #expect(await eventually { tail.named("load.").last?["fields"]?["n"]?.intValue == Int64(total) }, "\(b.health)")
        let received = Set(tail.named("load.").compactMap { $0["fields"]?["n"]?.intValue })
        let lost = total - received.count
        #expect(lost > 0, "beta came back before alpha: nothing was lost to count")
        func announced() -> Int64 {
            tail.named("bridge.gap").filter { $0["fields"]?["kind"] == "missed" && $0["fields"]?["origin_host"] == "alpha" }
                .compactMap { $0["fields"]?["dropped"]?.intValue }.reduce(0, +)
        }
        // Announced within a quarter second of the jump; waited for, not timed.
        #expect(await eventually { announced() >= Int64(lost) }, "announced \(announced()) missed of \(lost) lost: \(b.health)")
        #expect(announced() == Int64(lost))
        #expect(b.count("missed") == Int64(lost) && b.count("lost") == Int64(lost), "\(b.health)")
        #expect(tail.named("bridge.gap").contains { $0["fields"]?["kind"] == "disconnected" })
        print("core loss count test: \(total) events, \(lost) lost during the outage, \(announced()) announced as missed")
        await a.kill(SIGTERM)
        await b.kill(SIGTERM)
        server.stop()
    }
}
