import ControlProtocol
import Dispatch
import EventBusKit
import EventBusMetrics
import EventSources
import Logging
import ModuleLoading
import Synchronization
import SystemCalls

/// The host: one bus, the timers, file and journal watches and the handler modules its config
/// file names, started,
/// reloaded and shut down as a whole.
///
/// ## Threads
/// Every change — start, reload, shutdown — runs on one serial *control queue*, so they never
/// overlap (a SIGHUP during startup waits for it) and none needs a lock of its own. They block
/// that queue while module code runs (bounded by the module call time limit), never a Swift
/// concurrency thread: the `async` methods only wait for the queue. Events flow independently
/// of it: the bus's delivery loop and each module's mailbox queue.
public final class BusHost: @unchecked Sendable {
    // @unchecked: `config`, `timers` and `isShutDown` are touched only on `control`; the rest is
    // immutable or Sendable.

    public let bus: Bus
    public let configPath: String
    private let logger: Logger
    private let modules: ModuleHost
    private let control = DispatchQueue(label: "eventbus.host.control")
    private let timers: HeldSources<TimerConfig>
    private let watches: HeldSources<WatchConfig>
    private var config: HostConfig?
    private var isShutDown = false
    private let controlServer: ControlServer?
    private let bridge: HostBridge
    private let inheritedControlSocket: (fileDescriptor: Int32, path: String?)?
    /// Replaces the config's `control.socket` (eventbusd's `--socket`), at start and each reload.
    private let controlSocketOverride: String?
    private var stallWatch: ModuleStallWatch?
    private var heapReturn: HeapReturn?
    /// The metrics the control socket's `metrics` request and `metrics.listen` serve; only a
    /// host that serves a control socket collects them.
    private let metrics: HostMetrics?
    /// The thread of the control socket and the metrics listener; made by ``start(progress:)``
    /// when the host serves the control socket, ended last at shutdown. On the control queue.
    private var loop: System.EventLoop?
    /// What the source kinds were registered with; its state directory follows the config.
    private let sourceEnvironment: SourceEnvironment
    private let rules: RuleEngine

    /// How long a host waits for a module's activate, reconfigure or deactivate unless told;
    /// `--check-config` gives a module's load as long.
    public static let defaultModuleCallTimeout = Duration.seconds(30)

    /// - Parameters:
    ///   - configPath: the YAML config; read by ``start()`` and again by each ``reload()``.
    ///   - moduleCallTimeout: how long the host waits for a module's activate, reconfigure or
    ///     deactivate before giving up on it.
    ///   - control: whether the host serves the control socket (``ControlSocket``); none by
    ///     default, so hosts embedded in tests or tools do not compete for the system's socket.
    ///   - controlSocketPath: an absolute path that replaces the config's `control.socket`.
    public init(configPath: String, logger: Logger, bus: Bus = Bus(), loader: ModuleLoader = ModuleLoader(),
                moduleCallTimeout: Duration = BusHost.defaultModuleCallTimeout, control: ControlSocket = .none,
                controlSocketPath: String? = nil) {
        self.bus = bus
        self.controlSocketOverride = controlSocketPath
        self.configPath = configPath
        self.logger = logger
        let bridge = HostBridge(bus: bus, logger: logger)
        self.bridge = bridge
        let metrics: HostMetrics?
        if case .none = control {
            metrics = nil
        } else {
            metrics = HostMetrics(bus: bus, bridge: { bridge.statistics })
        }
        self.metrics = metrics
        var handlerTiming: (@Sendable (String) -> @Sendable (Int64) -> Void)?
        if let durations = metrics?.handlerDurations {
            handlerTiming = { name in durations.recorder(forModule: name) }
        }
        let modules = ModuleHost(bus: bus, loader: loader, logger: logger, callTimeout: moduleCallTimeout,
                                 handlerTiming: handlerTiming)
        self.modules = modules
        metrics?.attach(modules: { modules.statistics })
        let rules = RuleEngine(bus: bus, logger: logger)
        self.rules = rules
        metrics?.attach(rules: { rules.statistics })
        self.timers = HeldSources(bus: bus, logger: logger)
        self.watches = HeldSources(bus: bus, logger: logger)
        // The OS-backed sources modules and clients can ask for (`bus.files(at:)`), every kind
        // of the registry; the state directory is the config's once `start` read it.
        let sourceEnvironment = SourceEnvironment(stateDirectory: HostConfig.defaultStateDirectory,
                                                  journalLags: metrics?.journalLags)
        self.sourceEnvironment = sourceEnvironment
        let sourceStates = SourceKinds.registerAll(on: bus, environment: sourceEnvironment)
        switch control {
        case .none:
            controlServer = nil
            inheritedControlSocket = nil
        case .configured, .inherited:
            let server = ControlServer(bus: bus, logger: logger, snapshot: {
                ControlServer.HostSnapshot(configFile: configPath, modules: modules.statistics, rules: rules.statistics,
                                           bridge: bridge.status, sourceStates: sourceStates())
            }, metrics: { [weak metrics] in metrics?.render() ?? [] }, handlerSeconds: { [weak metrics] module in
                metrics?.handlerDurations.cumulativeCounts(forModule: module).map { counts in
                    StatsReport.Histogram(bounds: HandlerDurations.boundsInSeconds, counts: counts.map { Int64(clamping: $0) })
                }
            })
            // Held strongly: a weak reference gives the server a side table, and every retain
            // and release of it — one pair per posted event in the fan-out — then takes the
            // runtime's slow path. No cycle: the server holds the metrics weakly.
            metrics?.attach(clients: { server.clientFigures() })
            controlServer = server
            if case .inherited(let fd, let path) = control { inheritedControlSocket = (fd, path) } else { inheritedControlSocket = nil }
        }
    }

    private func loadConfig() throws(ConfigError) -> HostConfig {
        var config = try HostConfig.load(from: configPath)
        if let controlSocketOverride { config.control.socketPath = controlSocketOverride }
        return config
    }

    /// Per-module state and counts; any thread.
    public var moduleStatistics: [ModuleStatistics] { modules.statistics }

    /// Per-rule state and counts, in config order; any thread.
    public var ruleStatistics: [RuleStatistics] { rules.statistics }

    private func onControlQueue<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            control.async { continuation.resume(returning: body()) }
        }
    }

    /// Reads the config and starts: modules first, so they are subscribed before the first
    /// tick, then timers. A bad config throws (there is nothing to run); a module that fails to
    /// load or activate is logged and left out — the host runs without it. `progress` hears of
    /// each step that may take a while before it runs (on the control queue).
    public func start(progress: @escaping @Sendable (HostProgress) -> Void = { _ in }) async throws(ConfigError) {
        let result: Result<HostConfig, ConfigError> = await onControlQueue { [self] in
            let config: HostConfig
            do throws(ConfigError) { config = try loadConfig() } catch { return .failure(error) }
            // Before the modules, so the replay ring holds their first events too.
            if let controlServer {
                let loop: System.EventLoop
                do { loop = try System.EventLoop(name: "eventbus.ctrl") } catch {
                    return .failure(ConfigError(file: config.file, line: nil, key: "control.socket", message: "\(error)"))
                }
                loop.start()
                do throws(MetricsListenerError) {
                    try metrics?.apply(config.metrics, on: loop, logger: logger)
                } catch {
                    loop.stopAndWait()
                    return .failure(ConfigError(file: config.file, line: nil, key: "metrics.listen", message: error.description))
                }
                do throws(ControlServer.StartError) {
                    var settings = config.control
                    if let inheritedPath = inheritedControlSocket?.path { settings.socketPath = inheritedPath }
                    try controlServer.start(settings: settings, inherited: inheritedControlSocket?.fileDescriptor, on: loop)
                } catch {
                    metrics?.stop()
                    loop.stopAndWait()
                    return .failure(ConfigError(file: config.file, line: nil, key: "control.socket", message: error.description))
                }
                self.loop = loop
            }
            // Before the modules, so their activate can subscribe to the journal.
            sourceEnvironment.stateDirectory = config.stateDirectory
            metrics?.name(journalWatches: config.watches)
            modules.start(config.modules, defaultMailbox: config.moduleMailbox, progress: progress)
            // Like modules, subscribed before the first tick or file change.
            rules.apply(config.rules, launcher: config.rulesLauncher, stateDirectory: config.stateDirectory)
            timers.apply(config.timers)
            watches.apply(config.watches)
            // Last, so modules are subscribed before the first imported event arrives.
            bridge.apply(config.bridge, stateDirectory: config.stateDirectory)
            // Clients waited in the backlog until now: what they post reaches every module.
            do throws(ControlServer.StartError) { try controlServer?.startAccepting() } catch {
                return .failure(ConfigError(file: config.file, line: nil, key: "control.socket", message: error.description))
            }
            self.config = config
            stallWatch = ModuleStallWatch(logger: logger) { [modules] in modules.statistics }
            heapReturn = HeapReturn()
            return .success(config)
        }
        let config = try result.get()
        let statistics = modules.statistics
        let active = statistics.filter { $0.state == .active }.count
        let failed = statistics.filter { if case .failed = $0.state { return true } else { return false } }.count
        logger.info("eventbusd started from \(config.file): \(active) module(s) active, \(failed) refused, \(config.timers.count) timer(s), \(config.watches.count) watch(es), \(config.rules.filter(\.enabled).count) rule(s)")
    }

    /// Reads the config again and applies it as a whole or not at all. The parts that can fail
    /// — a config that does not load, a module section its module refuses, a new or changed
    /// module whose new instance does not activate — are prepared first while everything runs
    /// on (``ReloadTransaction``, ``ModuleReload``); if any has a problem, every prepared part
    /// is undone and the outcome is `refused` with each `file:line: key: problem`. Then the
    /// sections that cannot fail follow. `progress` as for ``start(progress:)``.
    @discardableResult
    public func reload(progress: @escaping @Sendable (HostProgress) -> Void = { _ in }) async -> ReloadOutcome {
        await onControlQueue { [self] in
            guard !isShutDown else { return .refused("eventbusd is shutting down") }
            let new: HostConfig
            do {
                new = try loadConfig()
            } catch {
                logger.error("reload failed, keeping the running config: \(error)")
                return .refused("\(error); the running config stays")
            }
            var transaction = ReloadTransaction()
            if let running = config, new.stateDirectory != running.stateDirectory {
                // Before the modules, so new instances that watch the journal use the new
                // directory; running journal watches keep their driver.
                sourceEnvironment.stateDirectory = new.stateDirectory
                transaction.add(abandon: { self.sourceEnvironment.stateDirectory = running.stateDirectory })
            }
            let moduleChange = modules.prepare(new.modules, defaultMailbox: new.moduleMailbox, progress: progress)
            transaction.add(problems: moduleChange.problems,
                            commit: { self.modules.commit(moduleChange, progress: progress) },
                            abandon: { self.modules.abandon(moduleChange, progress: progress) })
            let problems = transaction.finish()
            guard problems.isEmpty else {
                let text = problems.map(\.description).joined(separator: "\n")
                    + "\nreload refused (\(problems.count) problem(s)): nothing was changed, the running config stays"
                logger.error("\(text)")
                return .refused(text)
            }
            metrics?.name(journalWatches: new.watches)
            timers.apply(new.timers)
            watches.apply(new.watches)
            rules.apply(new.rules, launcher: new.rulesLauncher, stateDirectory: new.stateDirectory)
            controlServer?.apply(new.control)
            do throws(MetricsListenerError) {
                if let loop { try metrics?.apply(new.metrics, on: loop, logger: logger) }
            } catch {
                logger.error("reload: \(error); the metrics listener stays as it was")
            }
            bridge.apply(new.bridge, stateDirectory: new.stateDirectory)
            config = new
            let active = modules.statistics.filter { $0.state == .active }.count
            let summary = "reloaded \(new.file): \(active) module(s) active, \(new.timers.count) timer(s), \(new.rules.filter(\.enabled).count) rule(s)"
            logger.info("\(summary)")
            return .applied(summary)
        }
    }

    /// Lets control clients allowed to (root, eventbusd's own user) ask for a reload
    /// (`eventbus reload`); `reload` runs it and hands the outcome back. Set before ``start(progress:)``.
    public func acceptReloadRequests(_ reload: @escaping @Sendable (@escaping @Sendable (ReloadOutcome) -> Void) -> Void) {
        controlServer?.reloadHandler = reload
    }

    /// What a shutdown could not finish in its time budget.
    public struct ShutdownReport: Sendable, Equatable {
        /// Modules whose mailbox still held events at the deadline (those events are lost).
        public var undrained: [String]
        /// Modules whose `deactivate` had not returned at the deadline.
        public var notDeactivated: [String]
        public var isClean: Bool { undrained.isEmpty && notDeactivated.isEmpty }
    }

    /// Graceful shutdown within the config's `shutdown_timeout`: refuse new posts from control
    /// clients, let the bus deliver what it acknowledged, stop the timers, let every mailbox
    /// deliver what it holds and deactivate every module (all modules at once, within the one
    /// budget), end the control clients' streams after what they hold, finish the bus. Waits
    /// never run past the budget; what did not finish is logged and reported. `progress` hears
    /// of the budget first.
    ///
    /// Why this order: an event answered `posted` must reach the tails and modules or be
    /// counted as lost. So posts are refused (`shutting_down`) first — nothing is acknowledged
    /// after that — and the bus is given time to hand the acknowledged ones to the modules'
    /// mailboxes and the tails' feeds before anything is drained or closed.
    ///
    /// Control clients are answered throughout: `status` and `stats` say the host is stopping
    /// and what it still drains (``ShutdownProgress``); what the next host should serve —
    /// `subscribe`, `post`, `listing`, `reload` — is refused with `shutting_down`, which the CLI
    /// takes as a host restarting and asks again. The socket is closed only at the end, so with
    /// socket activation the clients that connect after that wait for the next eventbusd.
    public func shutdown(progress: @escaping @Sendable (HostProgress) -> Void = { _ in }) async -> ShutdownReport {
        await onControlQueue { [self] in
            guard !isShutDown else { return ShutdownReport(undrained: [], notDeactivated: []) }
            isShutDown = true
            let budget = config?.shutdownTimeout ?? HostConfig.defaultShutdownTimeout
            progress(.shuttingDown(budget: budget))
            let shutdown = ShutdownProgress(budget: budget)
            let deadline = shutdown.deadline
            logger.info("shutting down (budget \(budget))")
            if let controlServer {
                let acknowledged = controlServer.refusePosts()
                controlServer.beginStopping(shutdown)
                controlServer.waitForDelivery(upTo: acknowledged, until: deadline)
            }
            shutdown.advance(to: .stoppingRules)
            // After the acknowledged posts reached the bus's subscribers (the bridge's export
            // among them), before the rest stops: queued exports get their moment to leave.
            bridge.stop()
            stallWatch?.cancel()
            heapReturn?.cancel()
            timers.stopAll()
            watches.stopAll()
            let unfinishedRules = rules.stop(until: deadline)
            if !unfinishedRules.isEmpty {
                logger.warning("rules whose runs had not ended at the shutdown deadline: \(unfinishedRules.joined(separator: ", "))")
            }
            shutdown.advance(to: .drainingModules)
            let stopped = modules.drainAndDeactivateAll(until: deadline)
            shutdown.advance(to: .endingStreams)
            // Control clients last, so a tail sees what modules posted while stopping. They get a
            // moment to read their last lines even when the modules used up the budget.
            controlServer?.stop(within: min(.seconds(2), max(.milliseconds(500), deadline - .now)))
            metrics?.stop()
            loop?.stopAndWait()
            bus.finish()
            let report = ShutdownReport(undrained: stopped.undrained, notDeactivated: stopped.notDeactivated)
            logger.info("eventbusd stopped\(report.isClean ? "" : " (not clean: see above)")")
            return report
        }
    }
}
