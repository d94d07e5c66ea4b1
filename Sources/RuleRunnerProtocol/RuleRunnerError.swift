/// What went wrong with one run asked of the rule runner, on either side: the runner sends it as
/// its `error` answer (and logs it); the client turns it into the run's failed start.
public struct RuleRunnerError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: String, Sendable, Equatable, CaseIterable {
        /// Not a request of this protocol: not JSON, an unknown op or member, a value of the
        /// wrong type or out of range.
        case badRequest = "bad_request"
        /// A line longer than ``RuleRunnerProtocol/maximumLineBytes``.
        case lineTooLong = "line_too_long"
        /// No request came in time.
        case noRequest = "no_request"
        /// The peer is neither root nor the runner's client user (SO_PEERCRED).
        case refusedPeer = "refused_peer"
        /// The root-owned config cannot be read, or is refused.
        case config
        /// No enabled rule of that name in the config.
        case noSuchRule = "no_such_rule"
        /// The rule has no action at that index, or it is not a `run:` action.
        case notARunAction = "not_a_run_action"
        /// A triggering event is not an `event` line of `eventbus tail --json`.
        case badEvent = "bad_event"
        /// The command cannot be built from the events (an expansion holding a NUL byte).
        case refusedCommand = "refused_command"
        /// systemd will not start units for the runner.
        case unavailable
        /// The connection failed, or the other side said something out of turn.
        case connection
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.rawValue): \(message)" }
}
