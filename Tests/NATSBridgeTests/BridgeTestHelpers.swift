import EventBusKit
import Foundation
import Logging
import NATSBridge
import Testing
import TestSupport

/// A started bridge for `config` on `bus`, keeping its state under `directory`.
func startBridge(_ config: BridgeConfig, _ bus: Bus, _ directory: TemporaryDirectory) throws -> NATSBridge {
    let bridge = NATSBridge(config: config, bus: bus, stateDirectory: directory.at("state-\(config.host)"),
                            logger: Logger(label: "bridge-\(config.host)"))
    try bridge.start()
    return bridge
}

/// The pair most bridge tests start from: `alpha` exports `app.>` and `beta` imports it, both
/// through `server`, in durable mode when asked; a test sets what it varies on the copies.
func appPair(_ server: NATSServer, durable: Bool) throws -> (exporting: BridgeConfig, importing: BridgeConfig) {
    var exporting = BridgeConfig(servers: [server.url], host: "alpha")
    exporting.export = [try EventPattern("app.>")]
    var importing = BridgeConfig(servers: [server.url], host: "beta")
    importing.import = [try EventPattern("app.>")]
    if durable {
        exporting.durable = BridgeConfig.Durable()
        importing.durable = BridgeConfig.Durable()
    }
    return (exporting, importing)
}

/// The events of `pattern` on `bus` as they come (each also handed to `each`), until the
/// subscription is cancelled.
func collect(_ bus: Bus, _ pattern: String, each: @escaping @Sendable (Event) -> Void = { _ in }) throws
    -> (Collected<[Event]>, AnyCancellable) {
    let events = Collected<[Event]>([])
    let subscription = try bus.publisher(for: pattern).sink { event in
        each(event)
        events.update { $0.append(event) }
    }
    return (events, subscription)
}

/// Posts `app.warmup` on `bus` until one reaches `received`: then the importing side is
/// subscribed (durable: its consumer is bound) and the next events are the test's own.
func warmUp(_ bus: Bus, _ received: Collected<[Event]>) async {
    #expect(await eventually {
        bus.post("app.warmup")
        return received.value.contains { $0.name == "app.warmup" }
    })
}
