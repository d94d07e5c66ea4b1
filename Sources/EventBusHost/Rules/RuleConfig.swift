import EventBusKit
import EventSources
import RuleActions

/// One rule of `rules:` (the host config or a `rules.d/*.yaml` file), as read: which events
/// trigger it, the operators between them and its actions, how concurrent runs are treated and
/// the actions it runs. Plain values: parsing is ``RuleConfigParser``'s business, running it
/// ``RuleEngine``'s. Equatable so a reload can tell a changed rule from an unchanged one.
public struct RuleConfig: Sendable, Equatable {
    /// Unique among all rules; names the rule in every record, metric and unit name.
    public var name: String
    /// `file:line` of the rule's entry.
    public var location: String
    public var trigger: RuleTrigger
    /// `from:` — sources the rule opens for itself (a folder, a unit's journal, unit states,
    /// devices), shared with every other subscriber of the same; the rule then sees only their
    /// events. None: the rule sees every event on the bus that matches its patterns.
    public var sources: [ConfiguredSource] = []
    /// `where:` — field conditions every triggering event must meet (for `all_of`, each
    /// event of the join).
    public var conditions: RuleConditions
    /// `debounce`, `throttle`, `distinct`, `collect`, in the order they are written.
    public var operators: [RuleOperator]
    public var mode: RuleMode
    /// What a run does, in order (`then:`, or the one action written on the rule).
    public var actions: [RuleAction]
    /// `enabled: false` keeps a rule in the file without running it.
    public var enabled: Bool

    public init(name: String, location: String, trigger: RuleTrigger, conditions: RuleConditions = RuleConditions(),
                operators: [RuleOperator] = [], mode: RuleMode = .single, actions: [RuleAction], enabled: Bool = true) {
        self.name = name
        self.location = location
        self.trigger = trigger
        self.conditions = conditions
        self.operators = operators
        self.mode = mode
        self.actions = actions
        self.enabled = enabled
    }
}

/// What starts a rule's pipeline.
public enum RuleTrigger: Sendable, Equatable {
    /// `on:` — any event matching one of the patterns (the patterns merged into one subscription).
    case any([EventPattern])
    /// `all_of:` + `within:` — one event of each pattern, all seen within the window (a
    /// `combineLatest` whose values expire): the join fires once with every one of them, then
    /// starts empty again.
    case allOf([EventPattern], within: Duration)

    /// Every pattern the rule subscribes to.
    public var patterns: [EventPattern] {
        switch self {
        case .any(let patterns), .allOf(let patterns, _): return patterns
        }
    }
}

/// The optional operators of a rule, each compiled to the SDK's Combine operator of that name.
public enum RuleOperator: Sendable, Equatable {
    /// `debounce: 2s` — fire once the events have paused this long, with the last one.
    case debounce(Duration)
    /// `throttle: 5m` — at most one trigger per window: the first of each window.
    case throttle(Duration)
    /// `distinct: [unit, state]` — `removeDuplicates` on these fields: a trigger whose values
    /// of them equal the previous trigger's is dropped.
    case distinct([String])
    /// `collect: 10`, `collect: 30s` or `collect: {count: 10, window: 30s}` — triggers
    /// gathered into one, by count, by time window, or whichever comes first.
    case collect(count: Int?, window: Duration?)
}

/// How a trigger that arrives while the rule's actions run is treated — Home Assistant's
/// automation modes.
public enum RuleMode: Sendable, Equatable {
    /// One run at a time; a trigger while it runs is skipped (counted, `rule.skipped`).
    case single
    /// The running run is stopped and a run for the newest trigger starts once it has ended
    /// (`switchToLatest`, `watchexec --restart`).
    case restart
    /// Runs one after another; at most `max` triggers wait, more are dropped (counted,
    /// `rule.skipped`).
    case queued(max: Int)
    /// At most `max` runs at once; a trigger beyond that is skipped (counted, `rule.skipped`).
    case parallel(max: Int)

    public var name: String {
        switch self {
        case .single: return "single"
        case .restart: return "restart"
        case .queued: return "queued"
        case .parallel: return "parallel"
        }
    }
}

/// One action of a run.
public enum RuleAction: Sendable, Equatable {
    case run(RunAction)
    case webhook(WebhookAction)
    /// `post:` — a derived event; name and field values are templates.
    case post(name: RuleTemplate, fields: [String: RuleTemplate])
    /// `log:` — a line in the host's log, at a module log's levels.
    case log(level: ModuleLog.Level, message: RuleTemplate)

    public var kind: String {
        switch self {
        case .run: return "run"
        case .webhook: return "webhook"
        case .post: return "post"
        case .log: return "log"
        }
    }
}

/// `run:` — a command, never through a shell unless `shell: true` is written.
public struct RunAction: Sendable, Equatable {
    /// The program and its arguments; each element is one argument whatever its template
    /// expands to. With `shell`, one element: the shell text (`/bin/sh -c`), templates refused.
    public var argv: [RuleTemplate]
    public var shell: Bool
    public var user: String?
    public var group: String?
    public var timeout: Duration?
    public var workingDirectory: String?
    /// `environment:` — added to the command's environment; values are templates.
    public var environment: [String: RuleTemplate]
    /// `properties:` — unit properties for a transient unit (`MemoryMax: 512M`).
    public var properties: [UnitProperty]

    public init(argv: [RuleTemplate], shell: Bool = false, user: String? = nil, group: String? = nil, timeout: Duration? = nil,
                workingDirectory: String? = nil, environment: [String: RuleTemplate] = [:], properties: [UnitProperty] = []) {
        self.argv = argv
        self.shell = shell
        self.user = user
        self.group = group
        self.timeout = timeout
        self.workingDirectory = workingDirectory
        self.environment = environment
        self.properties = properties
    }
}

/// `webhook:` — an HTTP request through the durable outbox.
public struct WebhookAction: Sendable, Equatable {
    public var url: RuleTemplate
    public var method: String
    public var headers: [(name: String, value: RuleTemplate)]
    /// nil: the triggering events as JSON.
    public var body: RuleTemplate?
    public var timeout: Duration
    public var attempts: Int

    public static func == (lhs: WebhookAction, rhs: WebhookAction) -> Bool {
        lhs.url == rhs.url && lhs.method == rhs.method && lhs.body == rhs.body && lhs.timeout == rhs.timeout
            && lhs.attempts == rhs.attempts && lhs.headers.map(\.name) == rhs.headers.map(\.name)
            && lhs.headers.map(\.value) == rhs.headers.map(\.value)
    }
}
