/// The outbox's counts since this life's ``WebhookOutbox/start()`` (``pending`` is what is on
/// disk now, including what a previous life left).
public struct WebhookStatistics: Sendable, Equatable {
    /// Deliveries stored and not yet done: waiting for a slot, in flight or waiting to retry.
    public var pending: Int
    /// Answered with a 2xx.
    public var delivered: Int
    /// Given up on (see ``WebhookReport/failed(_:reason:attempts:)``).
    public var failed: Int
    /// Refused by ``WebhookOutbox/enqueue(_:)`` (full, too large, not http(s), not writable).
    public var dropped: Int
    /// Attempts started, first ones and retries.
    public var attempts: Int
    /// Attempts after the first of a delivery.
    public var retries: Int

    public init(pending: Int = 0, delivered: Int = 0, failed: Int = 0, dropped: Int = 0, attempts: Int = 0, retries: Int = 0) {
        self.pending = pending
        self.delivered = delivered
        self.failed = failed
        self.dropped = dropped
        self.attempts = attempts
        self.retries = retries
    }
}
