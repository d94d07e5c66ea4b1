import CNATS

/// Why the bridge could not do something, with nats.c's own words where it had them.
public struct BridgeError: Error, Sendable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// Options nats.c refused (a bad URL, an unreadable TLS or credentials file…).
        case options
        /// The connection could not be made or was closed.
        case connection
        /// A JetStream request failed (stream or consumer set-up, a conflicting stream).
        case jetStream
        /// The state directory could not be read or written.
        case state
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }

    /// nats.c's text for `status`, with its last error detail when it has one.
    static func text(_ status: natsStatus) -> String {
        var last = natsStatus(0)
        let detail = nats_GetLastError(&last).map { String(cString: $0) } ?? ""
        let name = String(cString: natsStatus_GetText(status))
        return detail.isEmpty || detail == name ? name : "\(name): \(detail)"
    }

    static func check(_ status: natsStatus, _ code: Code, _ doing: @autoclosure () -> String) throws(BridgeError) {
        guard status != NATS_OK else { return }
        throw BridgeError(code, "\(doing()): \(text(status))")
    }
}
