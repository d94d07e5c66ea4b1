@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import NATSBridge

/// The bridge benchmarks' two hosts in one process: bus A's bridge exports `bench.>` as host
/// `bench-a`, bus B's imports it as `bench-b`, through the server at `url`, durable through
/// `stream` when one is named. `adjust` sets what a benchmark varies (buffers, limits, the
/// reconnect wait) on the exporting and the importing configuration before they start.
struct BenchBridgePair {
    let busA = Bus()
    let busB = Bus()
    let a: NATSBridge
    let b: NATSBridge

    init(url: String, stream: String?, stateDirectory: String, logLevel: Logger.Level,
         adjust: (_ exporting: inout BridgeConfig, _ importing: inout BridgeConfig) -> Void = { _, _ in }) throws {
        var logger = Logger(label: "bench")
        logger.logLevel = logLevel
        var exporting = BridgeConfig(servers: [url], host: "bench-a")
        exporting.export = [try EventPattern("bench.>")]
        var importing = BridgeConfig(servers: [url], host: "bench-b")
        importing.import = [try EventPattern("bench.>")]
        if let stream {
            var settings = BridgeConfig.Durable()
            settings.stream = stream
            exporting.durable = settings
            importing.durable = settings
        }
        adjust(&exporting, &importing)
        a = NATSBridge(config: exporting, bus: busA, stateDirectory: stateDirectory, logger: logger)
        b = NATSBridge(config: importing, bus: busB, stateDirectory: stateDirectory, logger: logger)
        try a.start()
        do { try b.start() } catch {
            a.stop()
            throw error
        }
    }

    func stop() {
        a.stop()
        b.stop()
    }
}
