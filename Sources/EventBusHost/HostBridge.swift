@_spi(EventBusHost) import EventBusKit
import ControlProtocol
import Logging
import NATSBridge

/// The host's seam to the NATS bridge: starts the bridge the config asks for with the bus,
/// restarts it when a reload changes `bridge.nats`, stops it with the host, and reports it in
/// the control socket's `status` answer.
///
/// Threads: ``apply(_:stateDirectory:)`` and ``stop()`` run on ``BusHost``'s control queue;
/// ``status`` on control-session queues, hence the lock around the running bridge.
final class HostBridge: Sendable {
    private let bus: Bus
    private let logger: Logger
    private let running = Locked<(bridge: NATSBridge, stateDirectory: String)?>(nil)

    init(bus: Bus, logger: Logger) {
        self.bus = bus
        self.logger = logger
    }

    /// Makes the running bridge match `config`. A bridge that cannot start is logged; the host
    /// runs on without it (NATS being down is not such a case: the bridge connects when it can).
    func apply(_ config: BridgeConfig?, stateDirectory: String) {
        if let current = running.withLock({ $0 }), current.bridge.config == config, current.stateDirectory == stateDirectory { return }
        stop()
        guard let config else { return }
        let bridge = NATSBridge(config: config, bus: bus, stateDirectory: stateDirectory, logger: logger)
        do {
            try bridge.start()
            running.withLock { $0 = (bridge, stateDirectory) }
        } catch {
            logger.error("bridge not started: \(error)")
            bridge.stop()
        }
    }

    func stop() {
        guard let current = running.withLock({ $0 }) else { return }
        current.bridge.stop()
        running.withLock { $0 = nil }
    }

    /// The running bridge's counts, for metrics; nil when none runs.
    var statistics: BridgeStatistics? { running.withLock { $0 }?.bridge.statistics }

    /// The bridge's part of `status`, nil when none runs.
    var status: JSON? {
        guard let bridge = running.withLock({ $0?.bridge }) else { return nil }
        let statistics = bridge.statistics
        func int<T: BinaryInteger>(_ value: T) -> JSON { .int(Int64(clamping: value)) }
        var object: [String: JSON] = [
            "host": .string(statistics.host), "mode": .string(statistics.mode), "state": .string(statistics.state),
            "servers": .array(statistics.servers.map(JSON.string)),
            "exported": int(statistics.exported), "export_queued": int(statistics.exportQueued),
            "export_in_flight": int(statistics.exportInFlight), "export_queued_bytes": int(statistics.exportQueuedBytes),
            "export_republished": int(statistics.exportRepublished),
            "consumers_remade": int(statistics.consumersRemade),
            "imported": int(statistics.imported),
            "import_lag": int(statistics.importLag), "import_unrecorded": int(statistics.importUnrecorded), "echoes_dropped": int(statistics.echoesDropped),
            "redeliveries_dropped": int(statistics.redeliveriesDropped),
            "duplicates_dropped_by_server": int(statistics.duplicatesDroppedByServer),
            "out_of_order": int(statistics.outOfOrder), "reordered": int(statistics.reordered), "lost": int(statistics.lost), "missed": int(statistics.missed), "gaps": int(statistics.gaps),
            "disconnects": int(statistics.disconnects), "reconnects": int(statistics.reconnects),
            "malformed": int(statistics.malformed),
            "origins": .array(statistics.origins.keys.sorted().map { host in
                let origin = statistics.origins[host]!
                return .object(["host": .string(host), "instance": int(origin.instance), "seq": int(origin.sequence)])
            }),
        ]
        if !statistics.overShare.isEmpty { object["over_share"] = .object(statistics.overShare.mapValues { int($0) }) }
        if let error = statistics.lastError { object["last_error"] = .string(error) }
        return .object(object)
    }
}
