/// One command a rule runs: what to execute and under which limits, the same whether it runs as
/// a transient systemd unit or as a child process of eventbusd. Plain values: the rule engine
/// fills it in (templates already expanded, one argv element per configured element), a
/// ``CommandLauncher`` carries it out.
public struct CommandSpec: Sendable, Equatable {
    /// The program (absolute path) and its arguments, exactly as they reach `execve`: never
    /// split, joined or read by a shell unless the rule wrote `shell: true` (then the engine
    /// puts `/bin/sh -c TEXT` here itself).
    public var argv: [String]
    /// Added to (not replacing) the launcher's base environment: `EVENTBUS_EVENT`,
    /// `EVENTBUS_SEQ`, `EVENTBUS_FIELD_<NAME>`, the rule's own `environment:`.
    public var environment: [String: String]
    /// Bytes for the command's standard input (the triggering event as JSON); then EOF.
    public var standardInput: [UInt8]
    /// Run as this user (a name); nil: the launcher's default (see its documentation).
    public var user: String?
    /// Run as this group (a name); nil: the user's primary group.
    public var group: String?
    /// Working directory; nil: `/`.
    public var workingDirectory: String?
    /// Stop the command (SIGTERM, then SIGKILL) when it runs longer than this; nil: no limit.
    public var timeout: Duration?
    /// How long a stopped command gets between SIGTERM and SIGKILL.
    public var stopGrace: Duration
    /// Extra systemd unit properties for a transient unit (`MemoryMax=512M`, `ProtectSystem=strict`,
    /// `PrivateTmp=yes`), in the words of systemd.exec/systemd.resource-control. A child-process
    /// launcher cannot apply them and refuses a spec that has any (``CommandLauncher/supportsUnitProperties``).
    public var unitProperties: [UnitProperty]
    /// The name of the transient unit, `eventbus-rule-<rule>-<run>.service` (escaped by the
    /// engine to unit-name characters); a child-process launcher uses it only in logs.
    public var unitName: String
    /// Lines of output kept for `action.finished` (the last ones).
    public var outputTailLines: Int
    /// The rule action this command is, when a rule's engine made it; nil for any other command.
    public var origin: CommandOrigin?

    public init(argv: [String], environment: [String: String] = [:], standardInput: [UInt8] = [],
                user: String? = nil, group: String? = nil, workingDirectory: String? = nil,
                timeout: Duration? = nil, stopGrace: Duration = .seconds(5), unitProperties: [UnitProperty] = [],
                unitName: String, outputTailLines: Int = 10, origin: CommandOrigin? = nil) {
        self.argv = argv
        self.environment = environment
        self.standardInput = standardInput
        self.user = user
        self.group = group
        self.workingDirectory = workingDirectory
        self.timeout = timeout
        self.stopGrace = stopGrace
        self.unitProperties = unitProperties
        self.unitName = unitName
        self.outputTailLines = outputTailLines
        self.origin = origin
    }
}

/// One `Name=value` unit property a rule sets on its transient unit, as written in a unit file.
/// The transient-unit launcher converts the ones it knows into their D-Bus types and refuses
/// the others with a clear error, checked when the rule is loaded.
public struct UnitProperty: Sendable, Equatable, Hashable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}
