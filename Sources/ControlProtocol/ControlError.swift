/// An `error` line of the control protocol: a stable ``Code`` for programs and a message for
/// people. The host answers every request it cannot carry out with one, and the connection
/// carries on (except for the greeting's `too_many_clients`, after which it closes).
public struct ControlError: Error, Equatable, Sendable, CustomStringConvertible {
    /// What went wrong, as a stable word. A struct, not an enum, so a client reads the code of a
    /// newer host it does not know (and shows the message).
    public struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The line is not JSON.
        public static let badJSON = Code(rawValue: "bad_json")
        /// The line is JSON but not a request the op takes (a missing or mistyped member, an
        /// unknown one, a value out of range).
        public static let badRequest = Code(rawValue: "bad_request")
        /// An `op` the host does not know.
        public static let unknownOp = Code(rawValue: "unknown_op")
        /// A line over ``ControlProtocol/maximumLineLength``: ignored up to its newline.
        public static let lineTooLong = Code(rawValue: "line_too_long")
        /// The client's user may not do this (the configured groups; root may do anything).
        public static let forbidden = Code(rawValue: "forbidden")
        /// The connection is refused at once: a client limit, or descriptors running out.
        public static let tooManyClients = Code(rawValue: "too_many_clients")
        /// A second `subscribe` on one connection.
        public static let alreadySubscribed = Code(rawValue: "already_subscribed")
        /// The host cannot do it now or at all (no such source on its bus, a watch that failed
        /// to open, no reload handler).
        public static let unavailable = Code(rawValue: "unavailable")
        /// A path to watch or list that does not exist.
        public static let notFound = Code(rawValue: "not_found")
        /// A posted event's name breaks the naming rules.
        public static let invalidName = Code(rawValue: "invalid_name")
        /// A subscription's pattern breaks the pattern rules.
        public static let invalidPattern = Code(rawValue: "invalid_pattern")
        /// A listing larger than one answer may carry.
        public static let tooLarge = Code(rawValue: "too_large")
        /// The host is shutting down: the event was not posted (a restarted host takes it).
        public static let shuttingDown = Code(rawValue: "shutting_down")
        /// A `reload` whose config was refused; the running config stays.
        public static let reloadFailed = Code(rawValue: "reload_failed")
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code): \(message)" }

    public static func badRequest(_ message: String) -> ControlError { ControlError(.badRequest, message) }
}
