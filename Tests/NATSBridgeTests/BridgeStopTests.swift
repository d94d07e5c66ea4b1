import EventBusKit
import Foundation
import Logging
import NATSBridge
import Testing
import TestSupport

/// A durable bridge stopped while its exporter (and importer) threads are still inside nats.c —
/// NATS unreachable or reconnecting, a stop that waits for them less than they take: the JetStream
/// context stays alive until the last of them has ended (`JetStreamContext`).
///
/// Before, `stop` destroyed the context when its wait ran out; the exporter's next JetStream call
/// then read freed memory (`js_PublishAsyncComplete` locking a freed mutex: a SEGV under the
/// address sanitizer within the first few dozen stops of `aStopThatWaitsForNothing…`). What is
/// checked is only that every stop returns and the process survives: with the address sanitizer
/// (`swift test --sanitize=address`) a use of the freed context is a crash.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct BridgeStopTests {
    func config(_ port: Int) throws -> BridgeConfig {
        var config = BridgeConfig(servers: ["nats://127.0.0.1:\(port)"], host: "alpha")
        config.export = [try EventPattern("app.>")]
        config.durable = BridgeConfig.Durable()
        config.reconnectWait = .milliseconds(5)
        config.maxReconnectWait = .milliseconds(20)
        return config
    }

    /// No server: the exporter waits for a connection, and the stop does not wait for it at all.
    @Test func aStopThatWaitsForNothingLeavesTheExporterItsJetStreamContext() throws {
        let directory = try TemporaryDirectory("bridge-stop")
        let port = try freeLoopbackPort()
        for _ in 1...200 {
            let bus = Bus()
            let bridge = NATSBridge(config: try config(port), bus: bus, stateDirectory: directory.at("state"),
                                    logger: Logger(label: "bridge-alpha"))
            try bridge.start()
            bus.post("app.tick")
            bridge.stop(timeout: .zero)
            #expect(bridge.statistics.state == "stopped")
        }
    }

    /// A server killed under a connected bridge that exports and imports (the exporter has
    /// published, so nats.c has its acknowledgement subscription and timer), the bridge stopped
    /// while it reconnects, at varied moments and with varied waits; the server comes back for
    /// the next round on the same port.
    @Test func stoppingWhileReconnectingAtVariedMoments() async throws {
        let directory = try TemporaryDirectory("bridge-stop")
        let port = try freeLoopbackPort()
        let waits: [Duration] = [.zero, .milliseconds(1), .milliseconds(10), .milliseconds(50)]
        for round in 0..<40 {
            let server = try NATSServer(storage: directory.path, port: port)
            let bus = Bus()
            var config = try config(port)
            config.import = [try EventPattern("other.>")]
            let bridge = NATSBridge(config: config, bus: bus, stateDirectory: directory.at("state"),
                                    logger: Logger(label: "bridge-alpha"))
            try bridge.start()
            #expect(await eventually {
                bus.post("app.tick")
                return bridge.statistics.exported > 0
            }, "round \(round): \(bridge.statistics)")
            for n in 1...50 { bus.post("app.tick", fields: ["n": .int(Int64(n))]) }
            server.sigkill()
            for n in 1...50 { bus.post("app.tick", fields: ["n": .int(Int64(n))]) }
            usleep(UInt32(round % 5) * 5_000)  // 0 to 20 ms into the reconnect
            bridge.stop(timeout: waits[round % waits.count])
            #expect(bridge.statistics.state == "stopped")
        }
    }
}
