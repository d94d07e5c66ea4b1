import Foundation

/// What became of one command.
public struct CommandOutcome: Sendable, Equatable {
    public enum Termination: Sendable, Equatable {
        /// Exited with this status (0: success).
        case exited(Int32)
        /// Killed by this signal (not by the launcher's own stop).
        case signalled(Int32)
        /// Ran past its timeout and was stopped.
        case timedOut
        /// Stopped because its run was cancelled (`restart` mode, a removed rule, shutdown).
        case stopped
        /// Never ran: the reason (no such program, unknown user, systemd refused the unit…).
        case failedToStart(String)
    }

    public var termination: Termination
    /// From the start to the end of the command (zero when it never started).
    public var duration: Duration
    /// The last lines of its standard output and error, interleaved as written, each line cut
    /// to a bounded length; for a transient unit, what its journal holds.
    public var outputTail: [String]

    public init(termination: Termination, duration: Duration, outputTail: [String] = []) {
        self.termination = termination
        self.duration = duration
        self.outputTail = outputTail
    }

    /// Exited with status 0.
    public var succeeded: Bool { termination == .exited(0) }
}

/// Where a started command runs, told as soon as it does (for `action.started`).
public struct CommandStart: Sendable, Equatable {
    /// The main process.
    public var pid: Int32?
    /// The transient unit's name, when it runs as one.
    public var unit: String?

    public init(pid: Int32?, unit: String?) {
        self.pid = pid
        self.unit = unit
    }
}
