import Dispatch
import EventBusKit
import Foundation
import Glibc
import Logging
import RuleActions
import Synchronization
import TransientUnits

/// `rules_launcher: systemd` without a systemd that will start units: each run fails, saying why.
struct UnavailableLauncher: CommandLauncher {
    let kind = "systemd"
    let supportsUnitProperties = true
    let reason: String

    func run(_ spec: CommandSpec, started: @escaping @Sendable (CommandStart) -> Void) async -> CommandOutcome {
        CommandOutcome(termination: .failedToStart(reason), duration: .zero)
    }
}

/// Where a rule's `webhook:` actions go: the durable outbox.
protocol RuleWebhookSink: Sendable {
    /// Queues the request durably and records `action.started` (later `action.finished` or
    /// `action.failed` from the delivery); false, recorded as `action.failed`, when it cannot.
    func enqueue(_ action: WebhookAction, step: RuleStep, trigger: RuleTriggerEvents, recorder: RuleRecorder) -> Bool
}

/// The host's rules: loads, changes and retires ``RuleRunner``s as the config says, and stops
/// their runs at shutdown.
///
/// Called on the host's control queue only (start, reload, shutdown), like the module registry;
/// ``statistics`` from any thread.
///
/// What a reload does to a rule: an unchanged rule keeps running untouched (its operators'
/// state, its queue and its counters); a changed rule is retired and its new version starts
/// with fresh state; a removed or disabled rule is retired. Retiring ends the subscription at
/// once and skips the triggers waiting in its queue (`rule.skipped`, reason "rule removed or
/// changed"); runs already under way go on to their end — bounded by their `timeout:` — and are
/// recorded, as systemd lets a running job finish across `daemon-reload`.
final class RuleEngine: @unchecked Sendable {
    // @unchecked: `runners` and `launcher` change only on the host's control queue; readers on
    // other threads go through `published`.

    private let bus: Bus
    private let logger: Logger
    private let webhooks: (any RuleWebhookSink)?
    private var runners: [String: RuleRunner] = [:]
    private let published = Mutex<[RuleRunner]>([])
    private var launcher: (any CommandLauncher)?
    private var launcherChoice: RulesLauncherChoice?
    /// Names this host life's runs, so unit names never repeat across restarts.
    let life: String
    /// Rules' pipelines share the default pool: they never block (commands are awaited).
    private let pool = DispatchQueue.global()

    init(bus: Bus, logger: Logger, webhooks: (any RuleWebhookSink)? = nil) {
        self.bus = bus
        self.logger = logger
        self.webhooks = webhooks
        self.life = String(UInt32.random(in: 0...UInt32.max), radix: 16)
    }

    /// The launcher `choice` means on this machine. `auto` falls back to child processes when
    /// no systemd manager will start units for this host, and says why.
    static func launcher(for choice: RulesLauncherChoice, logger: Logger) -> any CommandLauncher {
        switch choice {
        case .process:
            return ChildProcessLauncher()
        case .systemd, .auto:
            switch TransientUnitLauncher.connect() {
            case .success(let launcher):
                logger.info("rules run their commands as transient systemd units (\(launcher.address))")
                return launcher
            case .failure(let problem) where choice == .auto:
                logger.notice("rules run their commands as child processes of eventbusd: \(problem.message)")
                return ChildProcessLauncher()
            case .failure(let problem):
                logger.error("rules_launcher: systemd, but \(problem.message); every run fails until a reload finds systemd")
                return UnavailableLauncher(reason: problem.message)
            }
        }
    }

    /// Runs `rules` from now on (see the type's documentation for what changes).
    func apply(_ rules: [RuleConfig], launcher choice: RulesLauncherChoice) {
        if launcherChoice != choice {
            launcher = Self.launcher(for: choice, logger: logger)
            launcherChoice = choice
            // Running rules keep the launcher they started with; a rule started from now on
            // (new or changed) uses the new one.
        }
        let launcher = launcher!
        var next: [String: RuleRunner] = [:]
        for rule in rules where rule.enabled {
            if let running = runners[rule.name], running.config == rule {
                next[rule.name] = running
                continue
            }
            runners[rule.name]?.retire()
            let runner = RuleRunner(config: rule, bus: bus, launcher: launcher, webhooks: webhooks, logger: logger,
                                    life: life, pool: pool)
            runner.activate()
            next[rule.name] = runner
        }
        for (name, runner) in runners where next[name] !== runner { runner.retire() }
        runners = next
        let ordered = rules.compactMap { next[$0.name] }
        published.withLock { $0 = ordered }
    }

    /// Per rule, in config order.
    var statistics: [RuleStatistics] {
        published.withLock { $0 }.map(\.statistics)
    }

    /// Stops every rule and its runs (SIGTERM, then SIGKILL, or `StopUnit`), waiting for them
    /// until `deadline`. Returns the names of rules whose runs had not ended by then.
    func stop(until deadline: ContinuousClock.Instant) -> [String] {
        let stopping = runners.values.map { ($0.config.name, $0.stopRuns()) }
        runners = [:]
        published.withLock { $0 = [] }
        var unfinished: [String] = []
        for (name, tasks) in stopping where !tasks.isEmpty {
            let done = DispatchSemaphore(value: 0)
            Task {
                for task in tasks { await task.value }
                done.signal()
            }
            let left = deadline - .now
            let seconds = max(0, Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18)
            if done.wait(timeout: .now() + seconds) == .timedOut { unfinished.append(name) }
        }
        return unfinished
    }
}
