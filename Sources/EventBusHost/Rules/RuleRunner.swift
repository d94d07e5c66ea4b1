import Dispatch
import EventBusMetrics
import EventSources
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import RuleActions
import Synchronization

/// One loaded rule: its subscription, compiled into the SDK's operators, and its runs.
///
/// ## Threads
/// The rule has a ``Mailbox`` of its own: its pipeline (the `where` stage, the `all_of` join,
/// `debounce`, `throttle`, `distinct`, `collect`) and its mode's state run on the mailbox's
/// serial queue, so they never see concurrent calls and never hold up the bus. A run is a
/// Swift task: its actions run there one after another (commands are awaited, not blocked on),
/// and its end goes back to the queue. Counters sit behind a lock for readers on other threads.
final class RuleRunner: @unchecked Sendable {
    // @unchecked: `subscription`, `mode`, `join` and `tasks` are touched only on `queue`
    // (the subscription also by `activate`, before any event can arrive); the rest is immutable
    // or behind `counters`' lock.

    let config: RuleConfig
    private let bus: Bus
    private let mailbox: Mailbox
    private var queue: DispatchQueue { mailbox.queue }
    private let launcher: any CommandLauncher
    private let webhooks: (any RuleWebhookSink)?
    /// Why webhooks cannot be sent, when they cannot.
    private let webhooksProblem: String?
    private let recorder: RuleRecorder
    private let logger: Logger
    /// Names runs: `LIFE-N`, unique across host restarts (transient units of an earlier life
    /// may still be running).
    private let life: String
    private var subscription: AnyCancellable?
    private var mode: RuleModeState<RuleTriggerEvents>
    private var tasks: [UInt64: Task<Void, Never>] = [:]
    private let counters: Mutex<RuleStatistics>

    static let mailboxCapacity = 10_000
    static let mailboxBytes = 16 << 20

    init(config: RuleConfig, bus: Bus, launcher: any CommandLauncher, webhooks: (any RuleWebhookSink)?, webhooksProblem: String? = nil,
         logger: Logger,
         life: String, pool: DispatchQueue) {
        self.config = config
        self.mailbox = Mailbox(label: "rule.\(config.name)", capacity: Self.mailboxCapacity, byteCapacity: Self.mailboxBytes, pool: pool)
        self.bus = bus
        self.launcher = launcher
        self.webhooks = webhooks
        self.webhooksProblem = webhooksProblem
        self.recorder = RuleRecorder(bus: bus)
        self.logger = logger
        self.life = life
        self.mode = RuleModeState(mode: config.mode)
        var statistics = RuleStatistics(name: config.name, location: config.location, mode: config.mode.name, launcher: launcher.kind)
        statistics.durations = DurationHistogram(name: "eventbus_rule_run_duration_seconds", labels: [("rule", config.name)],
                                                 buckets: RuleStatistics.durationBuckets)
        self.counters = Mutex(statistics)
    }

    /// Read under the counters' lock only, never by waiting for the rule's queue: `eventbus
    /// rules` is answered at once however busy the rule is.
    var statistics: RuleStatistics {
        counters.withLock { $0 }
    }

    /// Why this rule cannot run under its launcher, if it cannot.
    var refusal: String? {
        let wantsProperties = config.actions.contains { if case .run(let run) = $0 { !run.properties.isEmpty } else { false } }
        if wantsProperties && !launcher.supportsUnitProperties {
            return "its unit properties need commands run as systemd units, and this host runs them as child processes (rules_launcher: \(launcher.kind))"
        }
        return nil
    }

    // MARK: The pipeline

    /// Subscribes: from now on matching events flow through the rule's operators.
    func activate() {
        if let refusal {
            counters.withLock { $0.state = .failed(refusal) }
            logger.error("rule \(config.name) (\(config.location)) is not running: \(refusal)")
            return
        }
        let name = config.name
        let derivedSource = "rule:\(name)"
        let conditions = config.conditions
        let scoped = bus.scoped(to: mailbox)
        let events: AnyPublisher<Event, Never>
        do {
            events = try Self.events(on: scoped, patterns: config.trigger.patterns, sources: config.sources)
        } catch {
            let reason = "cannot open its source: \(HostConfig.message(of: error))"
            counters.withLock { $0.state = .failed(reason) }
            logger.error("rule \(config.name) (\(config.location)) is not running: \(reason)")
            return
        }
        let matching = events.filter { [weak self] event in
            if let gap = event.gap {
                self?.dropped(gap)
                return false
            }
            // Never its own records nor its own derived events: a rule cannot trigger itself.
            if event.source == RuleRecorder.source, event.fields["rule"]?.stringValue == name { return false }
            if event.source == derivedSource { return false }
            if let depth = event.fields[Self.depthField]?.intValue, depth >= Self.maximumDepth {
                self?.tooDeep(event)
                return false
            }
            return conditions.accepts(event)
        }
        var triggers: AnyPublisher<[Event], Never>
        switch config.trigger {
        case .any:
            triggers = matching.map { [$0] }.eraseToAnyPublisher()
        case .allOf(let patterns, let window):
            var join = AllOfJoin(patterns: patterns, within: window)
            triggers = matching.compactMap { join.add($0) }.eraseToAnyPublisher()
        }
        let scheduler = queue.ocombine
        for op in config.operators {
            switch op {
            case .debounce(let interval):
                triggers = triggers.debounce(for: Self.stride(interval), scheduler: scheduler).eraseToAnyPublisher()
            case .throttle(let interval):
                triggers = triggers.throttle(for: Self.stride(interval), scheduler: scheduler, latest: false).eraseToAnyPublisher()
            case .distinct(let fields):
                triggers = triggers.removeDuplicates { previous, next in
                    fields.allSatisfy { previous.last?.fields[$0] == next.last?.fields[$0] }
                }.eraseToAnyPublisher()
            case .collect(let count, let window):
                switch (count, window) {
                case (let count?, let window?):
                    triggers = triggers.collect(.byTimeOrCount(scheduler, Self.stride(window), count)).map { $0.flatMap { $0 } }.eraseToAnyPublisher()
                case (nil, let window?):
                    triggers = triggers.collect(.byTime(scheduler, Self.stride(window))).map { $0.flatMap { $0 } }.eraseToAnyPublisher()
                case (let count?, nil):
                    triggers = triggers.collect(count).map { $0.flatMap { $0 } }.eraseToAnyPublisher()
                case (nil, nil):
                    break
                }
            }
        }
        subscription = triggers.sink { [weak self] events in
            guard let self, !events.isEmpty else { return }
            self.fire(RuleTriggerEvents(events))
        }
    }

    /// The rule's events: the bus's (its patterns), or only its own sources' (`from:`), merged.
    private static func events(on bus: Bus, patterns: [EventPattern], sources: [ConfiguredSource]) throws -> AnyPublisher<Event, Never> {
        guard !sources.isEmpty else { return bus.publisher(for: patterns).eraseToAnyPublisher() }
        let publishers = try sources.map { try $0.publisher(on: bus, for: patterns) }
        return Publishers.MergeMany(publishers).eraseToAnyPublisher()
    }

    private static func stride(_ duration: Duration) -> DispatchQueue.OCombine.SchedulerTimeType.Stride {
        .nanoseconds(Int(clamping: duration.clampedNanoseconds))
    }

    /// The field a derived event carries: how many rules' posts led to it. Rules that post what
    /// other rules react to could go round for ever (A posts x, B on x posts y, A on y…); a
    /// rule takes no event ``maximumDepth`` posts deep.
    static let depthField = "@rule.depth"
    static let maximumDepth: Int64 = 8

    private func tooDeep(_ event: Event) {
        counters.withLock { $0.skipped += 1 }
        recorder.skipped(rule: config.name, mode: config.mode,
                         reason: "derived \(Self.maximumDepth) rules deep (\(event.source)): rules that post what each other reacts to",
                         trigger: RuleTriggerEvents([event]))
    }

    /// The rule's mailbox dropped events (it could not keep up): counted and announced.
    private func dropped(_ gap: Gap) {
        counters.withLock { $0.dropped += UInt64(gap.dropped) }
        recorder.skipped(rule: config.name, mode: config.mode, reason: "mailbox full", trigger: nil, dropped: gap.dropped)
    }

    // MARK: Runs (on the queue)

    private func fire(_ trigger: RuleTriggerEvents) {
        counters.withLock { $0.fired += 1 }
        recorder.fired(rule: config.name, trigger: trigger)
        carry(out: mode.trigger(trigger))
    }

    private func carry(out decisions: [RuleModeState<RuleTriggerEvents>.Decision]) {
        defer {
            let (running, queued) = (mode.running.count, mode.queued)
            counters.withLock { counters in
                counters.running = running
                counters.queued = queued
            }
        }
        for decision in decisions {
            switch decision {
            case .start(let trigger, let run):
                counters.withLock { $0.runs += 1 }
                tasks[run] = Task { [self] in
                    await perform(trigger, run: "\(life)-\(run)")
                    queue.async { [self] in ended(run) }
                }
            case .stop(let run):
                tasks[run]?.cancel()
            case .skip(let trigger, let reason):
                counters.withLock { $0.skipped += 1 }
                recorder.skipped(rule: config.name, mode: config.mode, reason: reason.rawValue, trigger: trigger)
            }
        }
    }

    private func ended(_ run: UInt64) {
        tasks[run] = nil
        carry(out: mode.finished(run))
    }

    /// Stops taking triggers: the subscription ends, waiting triggers are skipped; runs under
    /// way go on to their end (their timeouts bound them) and are recorded. What a reload does
    /// to a removed, changed or disabled rule.
    func retire() {
        queue.sync {
            subscription?.cancel()
            subscription = nil
            carry(out: mode.retire())
        }
    }

    /// Retires the rule and stops its runs (the host is stopping); returns the tasks to wait for.
    func stopRuns() -> [Task<Void, Never>] {
        retire()
        return queue.sync {
            for task in tasks.values { task.cancel() }
            return Array(tasks.values)
        }
    }

    // MARK: Actions (in the run's task)

    private func perform(_ trigger: RuleTriggerEvents, run: String) async {
        let start = ContinuousClock.now
        var outcome = "success"
        for (index, action) in config.actions.enumerated() {
            let step = RuleStep(rule: config.name, run: run, action: index + 1, kind: action.kind, trigger: trigger.last.sequence)
            let result = await perform(action, step: step, trigger: trigger)
            outcome = result.outcome
            if !result.succeeded { break }  // then: stops at the first action that did not succeed
        }
        let summary = outcome
        let elapsed = (ContinuousClock.now - start).clampedNanoseconds
        counters.withLock { counters in
            counters.durations?.recordNanoseconds(elapsed)
            counters.lastRun = (Date(), summary)
            switch summary {
            case "success": counters.succeeded += 1
            case "timeout": counters.timedOut += 1
            case "stopped": counters.stopped += 1
            default: counters.failed += 1
            }
        }
    }

    private struct StepResult {
        var succeeded: Bool
        var outcome: String
    }

    private func perform(_ action: RuleAction, step: RuleStep, trigger: RuleTriggerEvents) async -> StepResult {
        switch action {
        case .run(let run):
            return await command(run, step: step, trigger: trigger)
        case .webhook(let webhook):
            guard let webhooks else {
                recorder.failed(step, reason: webhooksProblem ?? "the webhook outbox is not running")
                return StepResult(succeeded: false, outcome: "failed")
            }
            return webhooks.enqueue(webhook, step: step, trigger: trigger, recorder: recorder)
                ? StepResult(succeeded: true, outcome: "success") : StepResult(succeeded: false, outcome: "failed")
        case .post(let nameTemplate, let fieldTemplates):
            let name = nameTemplate.expand(trigger)
            do {
                try EventPattern.validate(eventName: name)
            } catch {
                recorder.failed(step, reason: "cannot post \"\(name)\": \(HostConfig.message(of: error))")
                return StepResult(succeeded: false, outcome: "failed")
            }
            var fields = fieldTemplates.mapValues { FieldValue.string($0.expand(trigger)) }
            fields[Self.depthField] = .int((trigger.last.fields[Self.depthField]?.intValue ?? 0) + 1)
            let sequence = bus.post(Event(name: name, source: "rule:\(config.name)", fields: fields))
            recorder.finished(step, details: ["outcome": "success", "posted_seq": .int(Int64(sequence))], duration: .zero)
            return StepResult(succeeded: true, outcome: "success")
        case .log(let level, let message):
            logger.log(level: level.swiftLogLevel, "rule \(config.name): \(message.expand(trigger))")
            recorder.finished(step, details: ["outcome": "success"], duration: .zero)
            return StepResult(succeeded: true, outcome: "success")
        }
    }

    private func command(_ action: RunAction, step: RuleStep, trigger: RuleTriggerEvents) async -> StepResult {
        let spec: CommandSpec
        do {
            spec = try RuleCommand.spec(for: action, rule: config.name, index: step.action, run: step.run, trigger: trigger)
        } catch {
            recorder.failed(step, reason: error.reason)
            return StepResult(succeeded: false, outcome: "failed")
        }
        let recorder = recorder
        let outcome = await launcher.run(spec) { start in
            var details: [String: FieldValue] = [:]
            if let pid = start.pid { details["pid"] = .int(Int64(pid)) }
            if let unit = start.unit { details["unit"] = .string(unit) }
            recorder.started(step, details: details)
        }
        var details: [String: FieldValue] = [:]
        let result: StepResult
        switch outcome.termination {
        case .failedToStart(let reason):
            recorder.failed(step, reason: reason)
            return StepResult(succeeded: false, outcome: "failed")
        case .exited(let status):
            details["exit_status"] = .int(Int64(status))
            result = status == 0 ? StepResult(succeeded: true, outcome: "success") : StepResult(succeeded: false, outcome: "exit \(status)")
            details["outcome"] = .string(status == 0 ? "success" : "exit")
        case .signalled(let signal):
            details["signal"] = .int(Int64(signal))
            details["outcome"] = "signal"
            result = StepResult(succeeded: false, outcome: "signal \(signal)")
        case .timedOut:
            details["outcome"] = "timeout"
            result = StepResult(succeeded: false, outcome: "timeout")
        case .stopped:
            details["outcome"] = "stopped"
            result = StepResult(succeeded: false, outcome: "stopped")
        }
        recorder.finished(step, details: details, duration: outcome.duration, output: outcome.outputTail)
        return result
    }
}
