import EventBusKit
import EventBusMetrics
import EventSources
import Foundation
import Logging
import NATSBridge
import Synchronization
import SystemCalls

/// The host's metrics: what `/metrics` and the control socket's `metrics` request answer.
///
/// Collected when scraped from the counts the host keeps anyway — the bus, each module's slot
/// and mailbox, the control clients' feeds, the file monitor, the bridge, `/proc/self` — so a
/// host nobody scrapes pays only for ``PostCounts`` (on the delivery loop) and the handler
/// histograms (on each module's queue). Names follow Prometheus's conventions: `eventbus_`,
/// base units (`_seconds`, `_bytes`), `_total` for counters; labels are bounded (a module's
/// configured name, a source kind, a fixed notice name), never an event name.
///
/// ## Threads
/// ``render()`` from any thread (the control loop's, for `/metrics` and the `metrics` request),
/// serialized by the registry's lock; ``apply(_:on:logger:)`` and ``stop()`` on ``BusHost``'s
/// control queue.
final class HostMetrics: Sendable {
    let registry = MetricsRegistry()
    let handlerDurations: HandlerDurations
    let postCounts = PostCounts()
    /// The running journal sources' lag (the host's journal driver lists them here).
    let journalLags = JournalLags()
    /// The configured name of each journal watch of `sources.journal`, by its options: the
    /// `watch` label of the journal lag series (see ``collectJournal(_:into:)``).
    private let journalNames = Mutex<[JournalWatch: String]>([:])
    private let bus: Bus
    private let bridge: @Sendable () -> BridgeStatistics?
    /// Set once by ``BusHost`` after it made the module host and the control server (which
    /// themselves refer to these metrics).
    private let modules = Mutex<@Sendable () -> [ModuleStatistics]>({ [] })
    private let rules = Mutex<@Sendable () -> [RuleStatistics]>({ [] })
    private let clients = Mutex<@Sendable () -> ControlServer.ClientFigures?>({ nil })
    private let listener = Mutex<MetricsListener?>(nil)
    /// Control clients' counts summed over every client seen, by the feed counts last read for
    /// each client still connected (a client gone takes what it did since the last scrape).
    private let clientTotals = Mutex(ClientTotals())

    /// The file monitor's figures as of the previous scrape: they are read on another thread,
    /// since the monitor's queue may be busy rescanning a large tree and a scrape on the control
    /// loop must not wait for it.
    private let files = Mutex<FileChangeMonitor.Statistics?>(nil)

    private struct ClientTotals {
        var delivered: UInt64 = 0
        var dropped: UInt64 = 0
        var last: [Int: (delivered: UInt64, dropped: UInt64)] = [:]
    }

    init(bus: Bus, bridge: @escaping @Sendable () -> BridgeStatistics?) {
        self.bus = bus
        self.bridge = bridge
        self.handlerDurations = HandlerDurations()
        postCounts.start(on: bus)
    }

    func attach(rules: @escaping @Sendable () -> [RuleStatistics]) {
        self.rules.withLock { $0 = rules }
    }

    func attach(modules: @escaping @Sendable () -> [ModuleStatistics]) {
        self.modules.withLock { $0 = modules }
    }

    /// Takes the names of `sources.journal`'s watches (at start and each reload).
    func name(journalWatches watches: [WatchConfig]) {
        var names: [JournalWatch: String] = [:]
        for watch in watches {
            // Watches with equal options share one source: the first name names it.
            if let options = watch.source.options as? JournalWatch, names[options] == nil { names[options] = watch.name }
        }
        journalNames.withLock { $0 = names }
    }

    func attach(clients: @escaping @Sendable () -> ControlServer.ClientFigures?) {
        self.clients.withLock { $0 = clients }
    }

    /// Starts, moves or stops the HTTP listener as `settings` say, served on `loop` (the control
    /// socket's). A listener that cannot bind throws, and what ran before runs on.
    func apply(_ settings: MetricsSettings, on loop: System.EventLoop, logger: Logger) throws(MetricsListenerError) {
        let current = listener.withLock { $0 }
        if current?.address == settings.listen { return }
        guard let address = settings.listen else {
            stopListener()
            return
        }
        let render: @Sendable () -> [UInt8] = { [weak self] in self?.render() ?? [] }
        let made: MetricsListener
        do {
            made = try MetricsListener(address: address, render: render)
        } catch {
            // The running one may hold the port (0.0.0.0 and 127.0.0.1 cannot both have it).
            guard let current, current.address.port == address.port else { throw error }
            stopListener()
            do {
                made = try MetricsListener(address: address, render: render)
            } catch {
                if let old = try? MetricsListener(address: current.address, render: render) {
                    old.start(on: loop)
                    listener.withLock { $0 = old }
                }
                throw error
            }
        }
        stopListener()
        made.start(on: loop)
        listener.withLock { $0 = made }
        logger.info("metrics: serving http://\(made.address)/metrics")
    }

    func stop() {
        stopListener()
        postCounts.stop()
    }

    private func stopListener() {
        let running = listener.withLock { listener in
            defer { listener = nil }
            return listener
        }
        running?.stop()
    }

    /// The text of one scrape (Prometheus text format 0.0.4).
    func render() -> [UInt8] {
        let bus = bus.statistics
        let modules = modules.withLock { $0 }()
        let rules = rules.withLock { $0 }()
        let clients = clients.withLock { $0 }()
        let bridge = bridge()
        DispatchQueue.global().async { [weak self] in
            let statistics = FileChangeMonitor.shared.statistics
            self?.files.withLock { $0 = statistics }
        }
        let files = self.files.withLock { $0 }
        let journal = journalLags.all.map { ($0.watch, $0.figures) }
        let process = ProcessFigures.read()
        let http = listener.withLock { $0?.statistics }
        let text = registry.render { scrape in
            for (kind, count) in postCounts.postedByKind {
                scrape.counter("eventbus_events_posted_total", help: "Events posted on the bus, by the kind of source that posted them.",
                               labels: [("source_kind", kind)], total: count)
            }
            scrape.counter("eventbus_bus_sequence_total", help: "Events posted on the bus since start (its last sequence number).", total: bus.posted)
            scrape.gauge("eventbus_bus_subscriptions", help: "Subscriptions on the bus.", value: Double(bus.subscriptions))
            var running: [String: Int] = [:]
            for id in bus.sources.keys { running[String(id.prefix { $0 != ":" }), default: 0] += 1 }
            for kind in SourceKinds.names {
                scrape.gauge("eventbus_sources_running", help: "Shared sources running, by kind.",
                             labels: [("kind", kind)], value: Double(running[kind] ?? 0))
            }
            for (name, count) in postCounts.noticesByName {
                scrape.counter("eventbus_notices_total", help: "Events this host posted that announce loss or trouble (gaps, overflows, crashes), by name; imports aside.",
                               labels: [("notice", name)], total: count)
            }
            for (name, count) in postCounts.importedNoticesByName {
                scrape.counter("eventbus_imported_notices_total", help: "Notices imported from other hosts through the NATS bridge, by name (as the remote host claims them).",
                               labels: [("notice", name)], total: count)
            }
            collectModules(modules, into: &scrape)
            collectRules(rules, into: &scrape)
            collectClients(clients, into: &scrape)
            if let files {
                scrape.gauge("eventbus_files_kernel_watches", help: "inotify watches held by the file source.", value: Double(files.kernelWatches))
                scrape.gauge("eventbus_files_watches", help: "File watches (sources) running.", value: Double(files.sources))
                scrape.counter("eventbus_files_overflows_total", help: "inotify queue overflows (each followed by a rescan).",
                               total: UInt64(files.overflows))
                scrape.counter("eventbus_files_rescans_total", help: "Walks of a watched tree after an inotify queue overflow (one per overflow and watch).",
                               total: UInt64(files.rescans))
            }
            collectJournal(journal, into: &scrape)
            if let bridge { collectBridge(bridge, into: &scrape) }
            if let http {
                for (outcome, count) in [("scrape", http.scrapes), ("rejected", http.rejected), ("timeout", http.timedOut)] {
                    scrape.counter("eventbus_metrics_http_requests_total", help: "Requests to the metrics listener, by outcome.",
                                   labels: [("outcome", outcome)], total: count)
                }
            }
            if let process { collectProcess(process, into: &scrape) }
        }
        return text + Array(handlerDurations.text(for: Set(modules.map(\.name))).utf8) + Array(RuleStatistics.durationText(rules).utf8)
    }

    private func collectRules(_ rules: [RuleStatistics], into scrape: inout MetricsRegistry.Scrape) {
        for rule in rules {
            let labels = [("rule", rule.name)]
            scrape.gauge("eventbus_rule_up", help: "1 while the rule takes triggers, else 0 (it could not start: eventbus rules says why).",
                         labels: labels, value: rule.state == .active ? 1 : 0)
            scrape.counter("eventbus_rule_fired_total", help: "Triggers that came out of the rule's operators.", labels: labels, total: rule.fired)
            scrape.counter("eventbus_rule_skipped_total", help: "Triggers the rule's mode did not run (busy, queue full, superseded, retired).",
                           labels: labels, total: rule.skipped)
            scrape.counter("eventbus_rule_events_dropped_total", help: "Events dropped because the rule's mailbox was full (announced as rule.skipped).",
                           labels: labels, total: rule.dropped)
            for (outcome, total) in [("success", rule.succeeded), ("failed", rule.failed), ("timeout", rule.timedOut), ("stopped", rule.stopped)] {
                scrape.counter("eventbus_rule_runs_total", help: "Runs of the rule's actions that ended, by outcome.",
                               labels: labels + [("outcome", outcome)], total: total)
            }
            scrape.gauge("eventbus_rule_running", help: "Runs of the rule under way.", labels: labels, value: Double(rule.running))
            scrape.gauge("eventbus_rule_queue_depth", help: "Triggers waiting for a run (queued and restart modes).", labels: labels, value: Double(rule.queued))
        }
    }

    private func collectModules(_ modules: [ModuleStatistics], into scrape: inout MetricsRegistry.Scrape) {
        for module in modules {
            let labels = [("module", module.name)]
            // A stalled exec module runs (its program does not read): up, and its drops say the rest.
            scrape.gauge("eventbus_module_up", help: "1 while the module is active, else 0.",
                         labels: labels, value: module.state == .active || module.state == .stalled ? 1 : 0)
            scrape.counter("eventbus_module_events_delivered_total", help: "Events the module's mailbox handed to it.",
                           labels: labels, total: module.delivered)
            scrape.counter("eventbus_module_events_dropped_total", help: "Events dropped because the module's mailbox was full (each run announced as a gap).",
                           labels: labels, total: module.dropped)
            scrape.gauge("eventbus_module_mailbox_depth", help: "Events waiting in the module's mailbox.",
                         labels: labels, value: Double(module.queued))
            scrape.gauge("eventbus_module_mailbox_bytes", help: "Estimated bytes of the events waiting in the module's mailbox.",
                         labels: labels, value: Double(module.queuedBytes))
            scrape.counter("eventbus_module_handler_errors_total", help: "Errors the module's handlers threw.",
                           labels: labels, total: UInt64(module.errors))
            scrape.counter("eventbus_module_restarts_total", help: "Restarts of the module's worker process after a crash.",
                           labels: labels, total: UInt64(module.restarts))
        }
    }

    private func collectClients(_ figures: ControlServer.ClientFigures?, into scrape: inout MetricsRegistry.Scrape) {
        guard let figures else { return }
        let totals = clientTotals.withLock { totals in
            var connected: [Int: (delivered: UInt64, dropped: UInt64)] = [:]
            for (id, statistics) in figures.feeds {
                let last = totals.last[id] ?? (0, 0)
                totals.delivered += statistics.delivered &- min(last.delivered, statistics.delivered)
                totals.dropped += statistics.dropped &- min(last.dropped, statistics.dropped)
                connected[id] = (statistics.delivered, statistics.dropped)
            }
            totals.last = connected
            return totals
        }
        scrape.gauge("eventbus_control_clients", help: "Clients connected to the control socket.", value: Double(figures.clients))
        scrape.gauge("eventbus_control_tailing_clients", help: "Control clients with a subscription (tails).", value: Double(figures.feeds.count))
        scrape.counter("eventbus_control_events_delivered_total", help: "Events written to tailing control clients.", total: totals.delivered)
        scrape.counter("eventbus_control_events_dropped_total", help: "Events dropped for tailing control clients that did not keep up (announced as gap lines).",
                       total: totals.dropped)
        scrape.gauge("eventbus_control_queued_events", help: "Events waiting in tailing clients' buffers.",
                     value: Double(figures.feeds.reduce(0) { $0 + $1.statistics.queued }))
        for (reason, count) in [("limit", figures.refusedLimit), ("descriptors", figures.refusedDescriptors)] {
            scrape.counter("eventbus_control_clients_refused_total", help: "Control clients refused, by reason (client limits, out of descriptors).",
                           labels: [("reason", reason)], total: UInt64(count))
        }
    }

    /// One series per configured journal watch running (`watch`: its name in `sources.journal`);
    /// the sources modules and control clients start on their own (whose options are their own
    /// text, unbounded) are folded into one series with `watch=""`: the largest lag, caught up
    /// only when all are, their posts summed.
    private func collectJournal(_ sources: [(JournalWatch, JournalLag.Figures)], into scrape: inout MetricsRegistry.Scrape) {
        let names = journalNames.withLock { $0 }
        var byName: [String: JournalLag.Figures] = [:]
        for (watch, figures) in sources {
            let name = names[watch] ?? ""
            guard var folded = byName[name] else {
                byName[name] = figures
                continue
            }
            folded.seconds = max(folded.seconds, figures.seconds)
            folded.caughtUp = folded.caughtUp && figures.caughtUp
            folded.posted += figures.posted
            byName[name] = folded
        }
        for (name, figures) in byName.sorted(by: { $0.key < $1.key }) {
            let labels = [("watch", name)]
            scrape.gauge("eventbus_journal_lag_seconds", help: "Realtime of the newest journal entry the watch matches minus that of the last one posted on the bus (0 when caught up).",
                         labels: labels, value: figures.seconds)
            scrape.gauge("eventbus_journal_caught_up", help: "1 when the watch's reader is at the end of the journal and has posted every entry it read, else 0.",
                         labels: labels, value: figures.caughtUp ? 1 : 0)
            scrape.counter("eventbus_journal_entries_posted_total", help: "Journal entries the watch posted on the bus since its source started.",
                           labels: labels, total: figures.posted)
        }
    }

    private func collectBridge(_ bridge: BridgeStatistics, into scrape: inout MetricsRegistry.Scrape) {
        scrape.gauge("eventbus_bridge_connected", help: "1 while the NATS bridge is connected, else 0.", value: bridge.state == "connected" ? 1 : 0)
        let counters: [(String, String, UInt64)] = [
            ("eventbus_bridge_events_exported_total", "Local events the bridge published (durable: acknowledged by the stream).", bridge.exported),
            ("eventbus_bridge_events_imported_total", "Remote events the bridge posted on the local bus.", bridge.imported),
            ("eventbus_bridge_events_lost_total", "Events known lost by the bridge (announced in bridge.gap events).", bridge.lost),
            ("eventbus_bridge_events_missed_total", "Core: other hosts' exports that never reached this host, counted by their numbers (also in lost).", bridge.missed),
            ("eventbus_bridge_echoes_dropped_total", "This host's own events coming back through NATS, dropped.", bridge.echoesDropped),
            ("eventbus_bridge_disconnects_total", "Disconnections from the NATS servers.", bridge.disconnects),
            ("eventbus_bridge_reconnects_total", "Reconnections to the NATS servers.", bridge.reconnects),
            ("eventbus_bridge_malformed_total", "Messages from NATS that were not events, dropped.", bridge.malformed),
            ("eventbus_bridge_consumers_remade_total", "Durable consumers made again because they stalled (nothing delivered while messages waited).", bridge.consumersRemade),
        ]
        for (name, help, total) in counters { scrape.counter(name, help: help, total: total) }
        for (origin, total) in bridge.overShare.sorted(by: { $0.key < $1.key }) {
            scrape.counter("eventbus_bridge_events_over_share_total",
                           help: "Core: imports of an origin dropped because it sent more than its share while other origins waited (also in lost; origin_host \"\" gathers origins past the 16 named).",
                           labels: [("origin_host", origin)], total: total)
        }
        scrape.gauge("eventbus_bridge_export_queued", help: "Events waiting to be published to NATS.", value: Double(bridge.exportQueued))
        scrape.gauge("eventbus_bridge_export_queued_bytes", help: "Estimated bytes of the exports held (bounded by export_buffer_bytes).",
                     value: Double(bridge.exportQueuedBytes))
        scrape.gauge("eventbus_bridge_import_lag", help: "Imports not yet posted on the local bus.", value: Double(bridge.importLag))
    }

    private func collectProcess(_ process: ProcessFigures, into scrape: inout MetricsRegistry.Scrape) {
        scrape.gauge("process_resident_memory_bytes", help: "Resident memory size in bytes.", value: Double(process.residentBytes))
        scrape.gauge("process_virtual_memory_bytes", help: "Virtual memory size in bytes.", value: Double(process.virtualBytes))
        scrape.gauge("process_open_fds", help: "Open file descriptors.", value: Double(process.openFileDescriptors))
        scrape.gauge("process_max_fds", help: "The open-files limit (RLIMIT_NOFILE, soft).", value: Double(process.maxFileDescriptors))
        scrape.gauge("process_threads", help: "Threads of the process.", value: Double(process.threads))
        scrape.gauge("process_start_time_seconds", help: "Start time of the process since the epoch, in seconds.", value: process.startTime)
        scrape.counter("process_cpu_seconds_total", help: "User and system CPU time spent, in seconds (whole seconds).",
                       total: UInt64(process.cpuSeconds))
    }
}
