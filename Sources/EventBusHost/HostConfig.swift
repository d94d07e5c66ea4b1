import ControlProtocol
import EventBusKit
import Foundation
import ModuleIsolation
import NATSBridge

/// The host's configuration, as read from its YAML file (see `examples/eventbus.yaml`).
/// Plain values: reading the file is ``HostConfig/load(from:)``'s business, acting on it the
/// host's.
public struct HostConfig: Sendable {
    /// `eventbus.yaml` in `$CONFIGURATION_DIRECTORY` when systemd set it
    /// (`ConfigurationDirectory=`), else `/etc/eventbus/eventbus.yaml`.
    public static var defaultPath: String {
        (ServiceDirectories.first(of: ProcessInfo.processInfo.environment["CONFIGURATION_DIRECTORY"]) ?? "/etc/eventbus") + "/eventbus.yaml"
    }

    /// The file it was read from, as named.
    public var file: String
    /// Timers the host runs for everyone (`sources.timers`).
    public var timers: [TimerConfig]
    /// `sources.files` and `sources.journal`.
    public var watches: [WatchConfig] = []
    /// Where the host keeps state across restarts: persisted journal positions.
    public var stateDirectory = HostConfig.defaultStateDirectory
    /// Handler modules (`modules`), in file order.
    public var modules: [ModuleEntry]
    /// What a module's mailbox holds before it drops (and announces) more
    /// (`module_mailbox_capacity`, `module_mailbox_bytes`); a module's entry may override them.
    public var moduleMailbox: MailboxLimits
    /// How long a graceful shutdown may take in all: draining mailboxes, then deactivating
    /// modules (`shutdown_timeout`).
    public var shutdownTimeout: Duration
    /// The control socket (`control`).
    public var control = ControlSettings()
    /// Where modules run unless their entry says (`module_isolation`); see ``defaultIsolation``.
    public var moduleIsolation = HostConfig.defaultIsolation
    /// Bridging this host's bus to others through NATS (`bridge.nats`); nil: not bridged.
    public var bridge: BridgeConfig?
    /// Serving `/metrics` over HTTP (`metrics`); off unless `metrics.listen` is set.
    public var metrics = MetricsSettings()
    /// `rules:` of the config, then of each `rules.d/*.yaml` beside it, in file order.
    public var rules: [RuleConfig] = []
    /// The `rules.d/*.yaml` files read, in the order read.
    public var ruleFiles: [String] = []
    /// How rules run their commands (`rules_launcher`).
    public var rulesLauncher = RulesLauncherChoice.auto

    /// Where state goes when the config names no `state_directory`: the first folder of
    /// `$STATE_DIRECTORY` when systemd set it (`StateDirectory=` in the unit, which also makes
    /// it writable under `ProtectSystem=strict` and owned by the service's user), else
    /// `/var/lib/eventbus` as root, else `$XDG_STATE_HOME/eventbus` (or
    /// `~/.local/state/eventbus`), as the XDG base directories put it.
    public static var defaultStateDirectory: String {
        defaultStateDirectory(environment: ProcessInfo.processInfo.environment, userID: getuid())
    }

    static func defaultStateDirectory(environment: [String: String], userID: uid_t) -> String {
        if let systemd = ServiceDirectories.first(of: environment["STATE_DIRECTORY"]) { return systemd }
        if userID == 0 { return "/var/lib/eventbus" }
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/eventbus" }
        return (environment["HOME"] ?? "/tmp") + "/.local/state/eventbus"
    }

    public static let defaultShutdownTimeout = Duration.seconds(10)

    public init(file: String, timers: [TimerConfig] = [], modules: [ModuleEntry] = [],
                moduleMailbox: MailboxLimits = MailboxLimits(),
                shutdownTimeout: Duration = HostConfig.defaultShutdownTimeout) {
        self.file = file
        self.timers = timers
        self.modules = modules
        self.moduleMailbox = moduleMailbox
        self.shutdownTimeout = shutdownTimeout
    }
}

/// One timer of `sources.timers`. The host holds a subscription to it, so it ticks for every
/// subscriber of `timer.tick`, whether or not any module asked for it.
public struct TimerConfig: Sendable, Hashable {
    /// The name in the config, for logs and for telling timers apart on reload.
    public var name: String
    public var schedule: TimerSchedule

    public init(name: String, schedule: TimerSchedule) {
        self.name = name
        self.schedule = schedule
    }
}

/// One entry of `modules`: which shared object to load under which name, and the module's own
/// section.
public struct ModuleEntry: Sendable {
    /// The key under `modules`; the module's identity in the host, logs and statistics.
    public var name: String
    /// Absolute path of the `.so`; a relative path in the file is resolved against the config
    /// file's directory, so a config and its modules can move together.
    public var path: String
    /// `enabled: false` keeps an entry in the file without loading it.
    public var enabled: Bool
    /// This module's mailbox capacity, when it overrides `module_mailbox_capacity`.
    public var mailboxCapacity: Int?
    /// This module's mailbox bytes, when it overrides `module_mailbox_bytes`.
    public var mailboxBytes: Int?
    /// The module's own section (`config:`), handed to it as its ``ModuleContext/config``.
    public var config: ModuleConfig
    /// Where the section and each of its keys are in the file, for the check against the
    /// module's declaration (``ModuleConfigRefusal``).
    public var configLocations: ModuleConfigLocations
    /// In a worker process or in eventbusd (`isolation`, else the host's `module_isolation`).
    public var isolation: IsolationMode = HostConfig.defaultIsolation
    /// How its worker runs (`worker:`), when isolated.
    public var worker = WorkerSettings()
    /// Set for an exec module (`exec:`, `subscribe:`, `posts_per_second`): a program in any
    /// language run in the worker's place, whose path is then ``path``.
    public var exec: ExecSettings?
    /// No `isolation` key: the host's `module_isolation` applies (set while parsing).
    var isolationFromHost = false
    /// Where the entry is, `file:line`, so load errors can point at it.
    public var location: String

    public init(name: String, path: String, enabled: Bool = true, mailboxCapacity: Int? = nil,
                config: ModuleConfig = ModuleConfig(), location: String) {
        self.name = name
        self.path = path
        self.enabled = enabled
        self.mailboxCapacity = mailboxCapacity
        self.config = config
        self.location = location
        // The loader sets the real places; an entry made in code points at its `file:line`.
        let file = location.split(separator: ":").dropLast().joined(separator: ":")
        self.configLocations = ModuleConfigLocations(file: file, key: "modules.\(name).config",
                                                     sectionLine: location.split(separator: ":").last.flatMap { Int($0) })
    }
    /// A problem of the module as a whole (it did not load, its activation threw), placed at its
    /// entry: `file:line: modules.NAME: message`.
    func problem(_ message: String) -> ConfigError {
        ConfigError(file: configLocations.file, line: location.split(separator: ":").last.flatMap { Int($0) },
                    key: "modules.\(name)", message: message)
    }
}

/// `rules_launcher`: how a rule's `run:` commands are started.
public enum RulesLauncherChoice: String, Sendable, CaseIterable {
    /// As transient systemd units when a systemd manager can be reached, else as child processes.
    case auto
    /// As transient systemd units; without a reachable manager, runs fail with the reason.
    case systemd
    /// As child processes of eventbusd, in their own process group.
    case process
}
