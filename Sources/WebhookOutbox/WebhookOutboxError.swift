/// Why ``WebhookOutbox/start()`` could not open the outbox's folder.
public struct WebhookOutboxError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// The folder could not be created, opened or made private (0700).
        case folder
        /// Its entries could not be listed.
        case listing
        /// Another outbox, in this process or another, has the folder open.
        case inUse
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
