import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation

/// The answers to `status`, `modules`, `stats` and `metrics`, and the clients' side of the
/// host's metrics: built on the asking thread from what is read under the server's lock.
extension ControlServer {
    func status() -> JSON {
        let host = snapshot()
        let bus = bus.statistics
        let (socket, clients, tailing, refusals, replay) = lock.withLock {
            (settings.socketPath, roster.count, feeds.count, roster.refused,
             JSON.object(["capacity": .int(Int64(ring.capacity)), "held": .int(Int64(ring.count)),
                          "byte_capacity": .int(Int64(ring.byteCapacity)), "bytes": .int(Int64(ring.bytes)),
                          "oldest_seq": .int(Int64(ring.oldestSequence)), "newest_seq": .int(Int64(ring.newestSequence))]))
        }
        let uptime = ContinuousClock.now - startedMonotonic
        var answer: [String: JSON] = [
            "type": "status",
            "protocol": .int(Int64(ControlProtocol.version)),
            "pid": .int(Int64(getpid())),
            "config": .string(host.configFile),
            "started": .string(startedAt.formatted(.iso8601)),
            "uptime_seconds": .double(uptime.secondsValue),
            "posted": .int(Int64(bus.posted)),
            "subscriptions": .int(Int64(bus.subscriptions)),
            "sources": .array(bus.sources.keys.sorted().map { id in
                var source: [String: JSON] = ["id": .string(id), "subscriptions": .int(Int64(bus.sources[id]!))]
                if let state = host.sourceStates[id] { source["state"] = .string(state) }
                return .object(source)
            }),
            "modules": .array(host.modules.map(Self.moduleJSON)),
            "control": .object(["socket": .string(socket), "clients": .int(Int64(clients)),
                                 "tailing": .int(Int64(tailing)), "replay": replay,
                                 "refused": .object(["limit": .int(Int64(refusals.limit)),
                                                     "descriptors": .int(Int64(refusals.descriptors))])]),
        ]
        if let bridge = host.bridge { answer["bridge"] = bridge }
        return .object(answer)
    }

    func modules() -> JSON {
        .object(["type": "modules", "modules": .array(snapshot().modules.map(Self.moduleJSON))])
    }

    /// Counters only: the bus, and each tailing client's feed.
    func stats() -> JSON {
        let bus = bus.statistics
        let (clients, feeds) = lock.withLock { (roster.count, self.feeds) }
        return .object([
            "type": "stats",
            "posted": .int(Int64(bus.posted)),
            "subscriptions": .int(Int64(bus.subscriptions)),
            "clients": .int(Int64(clients)),
            "tailing": .array(feeds.sorted { $0.client.id < $1.client.id }.map { feed in
                let statistics = feed.statistics
                return .object([
                    "client": .int(Int64(feed.client.id)), "uid": .int(Int64(feed.client.userID)),
                    "pid": .int(Int64(feed.client.processID)),
                    "delivered": .int(Int64(statistics.delivered)), "dropped": .int(Int64(statistics.dropped)),
                    "queued": .int(Int64(statistics.queued)), "queued_bytes": .int(Int64(statistics.queuedBytes)),
                ])
            }),
        ])
    }

    /// The `metrics` answer: the same Prometheus text `/metrics` serves, in one JSON string, so
    /// a host without `metrics.listen` can be read too (`eventbus metrics`).
    func metrics() -> JSON {
        .object([
            "type": "metrics",
            "content_type": "text/plain; version=0.0.4",
            "text": .string(String(decoding: metricsText(), as: UTF8.self)),
        ])
    }

    /// The clients' side of the host's metrics: counts, and each tailing client's feed.
    struct ClientFigures {
        var clients: Int
        var feeds: [(id: Int, statistics: TailFeed.Statistics)]
        var refusedLimit: Int
        var refusedDescriptors: Int
    }

    func clientFigures() -> ClientFigures {
        lock.lock()
        let clients = roster.count
        let feeds = self.feeds
        let refused = roster.refused
        lock.unlock()
        var figures = ClientFigures(clients: clients, feeds: [], refusedLimit: refused.limit, refusedDescriptors: refused.descriptors)
        for feed in feeds { figures.feeds.append((id: feed.client.id, statistics: feed.statistics)) }
        return figures
    }

    static func moduleJSON(_ module: ModuleStatistics) -> JSON {
        var object: [String: JSON] = [
            "name": .string(module.name),
            "path": .string(module.path),
            "delivered": .int(Int64(module.delivered)),
            "dropped": .int(Int64(module.dropped)),
            "queued": .int(Int64(module.queued)),
            "queued_bytes": .int(Int64(module.queuedBytes)),
            "errors": .int(Int64(module.errors)),
        ]
        switch module.state {
        case .starting: object["state"] = "starting"
        case .active: object["state"] = "active"
        case .disabled: object["state"] = "disabled"
        case .stopped: object["state"] = "stopped"
        case .restarting: object["state"] = "restarting"
        case .failed(let reason):
            object["state"] = "failed"
            object["reason"] = .string(reason)
        }
        if let name = module.reportedName { object["reported_name"] = .string(name) }
        if let version = module.version { object["version"] = .string(version) }
        object["isolation"] = .string(module.isolation.rawValue)
        object["restarts"] = .int(Int64(module.restarts))
        if let pid = module.workerPID { object["pid"] = .int(Int64(pid)) }
        if let crash = module.lastCrash { object["last_crash"] = .string(crash) }
        if let reason = module.configNotApplied { object["config_not_applied"] = .string(reason) }
        if let time = module.lastCrashTime { object["last_crash_time"] = .string(time.formatted(.iso8601)) }
        return .object(object)
    }
}
