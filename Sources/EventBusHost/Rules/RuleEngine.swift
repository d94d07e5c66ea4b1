import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import Glibc
import Logging
import RuleActions
import RuleRunnerProtocol
import Synchronization
import WebhookOutbox
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
    /// Started with the first rule that has a webhook action; nil until then, or when it could
    /// not start (its runs then fail, saying why).
    private var webhooks: RuleWebhooks?
    private var webhooksProblem: String?
    private var runners: [String: RuleRunner] = [:]
    private let published = Mutex<[RuleRunner]>([])
    private var launcher: (any CommandLauncher)?
    private var launcherChoice: RulesLauncherChoice?
    /// Names this host life's runs, so unit names never repeat across restarts.
    let life: String
    /// Rules' pipelines share the default pool: they never block (commands are awaited).
    private let pool = DispatchQueue.global()

    init(bus: Bus, logger: Logger) {
        self.bus = bus
        self.logger = logger
        self.life = String(UInt32.random(in: 0...UInt32.max), radix: 16)
    }

    /// The launcher `choice` means on this machine. When systemd refuses this user its units
    /// but `eventbus-rule-runner` listens, the runner starts them. `auto` falls back to child
    /// processes when no systemd manager will start units for this host, and says why.
    static func launcher(for choice: RulesLauncherChoice, logger: Logger) -> any CommandLauncher {
        switch choice {
        case .process:
            return ChildProcessLauncher()
        case .systemd, .auto:
            switch TransientUnitLauncher.connect() {
            case .success(let launcher):
                logger.info("rules run their commands as transient systemd units (\(launcher.address))")
                return launcher
            case .failure(let problem) where problem.code == .notAllowed && RuleRunnerLauncher.isListening():
                // systemd refuses this user its units; root's helper starts them for it, each
                // exactly as the root-owned config says (docs/rules-privileges.md).
                logger.info("rules run their commands as transient systemd units through eventbus-rule-runner (\(RuleRunnerProtocol.socketPath)), since \(problem.message)")
                return RuleRunnerLauncher()
            case .failure(let problem) where choice == .auto:
                logger.notice("rules run their commands as child processes of eventbusd: \(problem.message)")
                return ChildProcessLauncher()
            case .failure(let problem):
                logger.error("rules_launcher: systemd, but \(problem.message); every run fails until a reload finds systemd")
                return UnavailableLauncher(reason: problem.message)
            }
        }
    }

    /// Runs `rules` from now on (see the type's documentation for what changes); webhooks wait
    /// in `stateDirectory/webhooks`.
    func apply(_ rules: [RuleConfig], launcher choice: RulesLauncherChoice, stateDirectory: String) {
        let wantsWebhooks = rules.contains { $0.enabled && $0.actions.contains { if case .webhook = $0 { true } else { false } } }
        if wantsWebhooks && webhooks == nil && webhooksProblem == nil {
            do throws(WebhookOutboxError) {
                webhooks = try RuleWebhooks(directory: stateDirectory + "/webhooks", bus: bus, logger: logger)
            } catch {
                webhooksProblem = "the webhook outbox in \(stateDirectory)/webhooks cannot be used: \(error.message)"
                logger.error("\(webhooksProblem!)")
            }
        }
        // Chosen once there is a rule to run (a host without rules says nothing of launchers).
        // Running rules keep the launcher they started with; a rule started from now on (new or
        // changed) uses the one `choice` gives now.
        if launcherChoice != choice && rules.contains(where: \.enabled) {
            launcher = Self.launcher(for: choice, logger: logger)
            launcherChoice = choice
        }
        var next: [String: RuleRunner] = [:]
        for rule in rules where rule.enabled {
            if let running = runners[rule.name], running.config == rule {
                next[rule.name] = running
                continue
            }
            runners[rule.name]?.retire()
            let runner = RuleRunner(config: rule, bus: bus, launcher: launcher!, webhooks: webhooks, webhooksProblem: webhooksProblem,
                                    logger: logger, life: life, pool: pool)
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
    /// until `deadline`. Returns the names of rules whose runs had not ended by then. The rules
    /// stay in ``statistics`` until then, so a `status` asked meanwhile counts the runs still ending.
    func stop(until deadline: ContinuousClock.Instant) -> [String] {
        let stopping = runners.values.map { ($0.config.name, $0.stopRuns()) }
        runners = [:]
        var unfinished: [String] = []
        for (name, tasks) in stopping where !tasks.isEmpty {
            let ended = Self.wait(until: .now() + DispatchTimeInterval(deadline - .now)) { for task in tasks { await task.value } }
            if !ended { unfinished.append(name) }
        }
        published.withLock { $0 = [] }
        // What is not delivered by then stays on disk for the next life.
        if let webhooks {
            let budget = max(.milliseconds(100), deadline - .now)
            _ = Self.wait(until: .distantFuture) { await webhooks.shutdown(within: budget) }
        }
        return unfinished
    }

    /// Runs `body` and waits for it on this thread (the host's control queue) until `deadline`;
    /// whether it ended by then.
    private static func wait(until deadline: DispatchTime, _ body: @escaping @Sendable () async -> Void) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Task {
            await body()
            done.signal()
        }
        return done.wait(timeout: deadline) == .success
    }
}
