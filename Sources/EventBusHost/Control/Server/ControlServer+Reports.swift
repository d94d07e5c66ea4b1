import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import EventBusMetrics
import Foundation

/// The answers to `status`, `modules`, `stats` and `metrics` (the typed reports of
/// ``ControlProtocol``), and the clients' side of the host's metrics: built on the asking
/// thread from what is read under the server's lock.
extension ControlServer {
    func status() -> StatusReport {
        let host = snapshot()
        let bus = bus.statistics
        let (socket, clients, feeds, refusals, replay, stopping) = lock.withLock {
            (settings.socketPath, roster.count, self.feeds, roster.refused,
             StatusReport.Replay(capacity: Int64(ring.capacity), held: Int64(ring.count), byteCapacity: Int64(ring.byteCapacity),
                                 bytes: Int64(ring.bytes), oldestSequence: Int64(ring.oldestSequence),
                                 newestSequence: Int64(ring.newestSequence)),
             self.stopping)
        }
        var report = StatusReport(
            processID: Int64(getpid()), configFile: host.configFile, started: startedAt.formatted(.iso8601),
            uptimeSeconds: uptimeSeconds, posted: Int64(bus.posted), subscriptions: Int64(bus.subscriptions),
            sources: bus.sources.keys.sorted().map { id in
                StatusReport.Source(id: id, subscriptions: Int64(bus.sources[id]!), state: host.sourceStates[id])
            },
            modules: host.modules.map(Self.report),
            control: StatusReport.Control(socket: socket, clients: Int64(clients), tailing: Int64(feeds.count), replay: replay,
                                          refusedForLimit: Int64(refusals.limit), refusedForDescriptors: Int64(refusals.descriptors)),
            bridge: host.bridge)
        report.life = life
        report.stopping = stopping.map { Self.report($0, modules: host.modules, rules: host.rules, feeds: feeds) }
        return report
    }

    /// What a stopping host has left: the modules not stopped yet with what their mailboxes
    /// hold, the rule runs still running, the tails not ended yet with what their buffers hold.
    static func report(_ shutdown: ShutdownProgress, modules: [ModuleStatistics], rules: [RuleStatistics],
                       feeds: [TailFeed]) -> StoppingReport {
        let draining = modules.filter { module in
            switch module.state {
            case .starting, .active, .restarting, .stalled: return true
            case .stopped, .disabled, .failed: return false
            }
        }
        return StoppingReport(
            step: shutdown.step.rawValue, budgetSeconds: shutdown.budget.secondsValue, remainingSeconds: shutdown.remaining.secondsValue,
            modules: draining.map { StoppingReport.Module(name: $0.name, state: report($0).state, queued: Int64($0.queued)) },
            ruleRuns: Int64(rules.reduce(0) { $0 + $1.running }), tails: Int64(feeds.count),
            tailQueued: Int64(feeds.reduce(0) { $0 + $1.statistics.queued }))
    }

    func modules() -> JSON {
        ModulesAnswer(modules: snapshot().modules.map(Self.report)).json
    }

    func rules() -> JSON {
        RulesAnswer(rules: snapshot().rules.map { rule in
            var report = RuleReport(name: rule.name, location: rule.location, state: "active", mode: rule.mode, launcher: rule.launcher,
                                    fired: Int64(rule.fired), skipped: Int64(rule.skipped), dropped: Int64(rule.dropped),
                                    runs: Int64(rule.runs), succeeded: Int64(rule.succeeded), failed: Int64(rule.failed),
                                    timedOut: Int64(rule.timedOut), stopped: Int64(rule.stopped), running: Int64(rule.running),
                                    queued: Int64(rule.queued), lastRunTime: rule.lastRun?.time.formatted(.iso8601),
                                    lastOutcome: rule.lastRun?.outcome)
            if case .failed(let reason) = rule.state {
                report.state = "failed"
                report.reason = reason
            }
            return report
        }).json
    }

    /// The counters: the bus, and each tailing client's feed; with `detail`, the process's
    /// figures and each module's counts and handler durations too; while the host stops, what
    /// it has left.
    func stats(detail: Bool) -> StatsReport {
        let bus = bus.statistics
        let (clients, feeds, stopping) = lock.withLock { (roster.count, self.feeds, self.stopping) }
        var report = StatsReport(
            processID: Int64(getpid()), uptimeSeconds: uptimeSeconds, posted: Int64(bus.posted),
            subscriptions: Int64(bus.subscriptions), clients: Int64(clients), process: nil, modules: [],
            tailing: feeds.sorted { $0.client.id < $1.client.id }.map { feed in
                let statistics = feed.statistics
                return StatsReport.TailingClient(
                    client: Int64(feed.client.id), userID: Int64(feed.client.userID), processID: Int64(feed.client.processID),
                    delivered: Int64(statistics.delivered), dropped: Int64(statistics.dropped),
                    queued: Int64(statistics.queued), queuedBytes: Int64(statistics.queuedBytes))
            })
        if let stopping {
            let host = snapshot()
            report.stopping = Self.report(stopping, modules: host.modules, rules: host.rules, feeds: feeds)
        }
        guard detail else { return report }
        report.process = ProcessFigures.read().map { figures in
            StatsReport.Process(residentBytes: Int64(figures.residentBytes), openFiles: Int64(figures.openFileDescriptors),
                                threads: Int64(figures.threads))
        }
        report.modules = snapshot().modules.map { module in
            let report = Self.report(module)
            return StatsReport.Module(name: report.name, state: report.state, delivered: report.delivered, dropped: report.dropped,
                                      queued: report.queued, errors: report.errors, handlerSeconds: handlerSeconds(module.name))
        }
        return report
    }

    /// The `metrics` answer: the same Prometheus text `/metrics` serves, in one JSON string, so
    /// a host without `metrics.listen` can be read too (`eventbus metrics`).
    func metrics() -> JSON {
        MetricsAnswer.json(text: String(decoding: metricsText(), as: UTF8.self))
    }

    private var uptimeSeconds: Double { (ContinuousClock.now - startedMonotonic).secondsValue }

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

    static func report(_ module: ModuleStatistics) -> ModuleReport {
        var state = ""
        var reason: String?
        switch module.state {
        case .starting: state = "starting"
        case .active: state = "active"
        case .disabled: state = "disabled"
        case .stopped: state = "stopped"
        case .restarting: state = "restarting"
        case .stalled: state = "stalled"
        case .failed(let why):
            state = "failed"
            reason = why
        }
        return ModuleReport(
            name: module.name, path: module.path, state: state, reason: reason,
            delivered: Int64(module.delivered), dropped: Int64(module.dropped), queued: Int64(module.queued),
            queuedBytes: Int64(module.queuedBytes), errors: Int64(module.errors),
            reportedName: module.reportedName, version: module.version, isolation: module.isExec ? "exec" : module.isolation.rawValue,
            restarts: Int64(module.restarts), workerProcessID: module.workerPID.map { Int64($0) }, lastCrash: module.lastCrash,
            lastCrashTime: module.lastCrashTime?.formatted(.iso8601), configNotApplied: module.configNotApplied)
    }
}
