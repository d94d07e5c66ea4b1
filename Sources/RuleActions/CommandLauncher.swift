/// Runs a rule's commands: as transient systemd units when the host may start them
/// , else as child processes of eventbusd .
///
/// Why one protocol: a rule's modes (single, restart, queued, parallel) and its record on the bus
/// are the same whichever way the command runs; only starting, waiting and stopping differ.
public protocol CommandLauncher: Sendable {
    /// A word for `eventbus rules` and logs: "systemd" or "process".
    var kind: String { get }
    /// Whether ``CommandSpec/unitProperties`` can be honoured.
    var supportsUnitProperties: Bool { get }
    /// Starts `spec`, tells `started` where it runs once it does, and returns when it has ended.
    /// Cancelling the calling task stops the command — SIGTERM to its process group (or
    /// `StopUnit`), SIGKILL after ``CommandSpec/stopGrace`` — and returns ``CommandOutcome/Termination/stopped``
    /// once it is gone. Never throws: a command that cannot start is an outcome too.
    func run(_ spec: CommandSpec, started: @escaping @Sendable (CommandStart) -> Void) async -> CommandOutcome
}
