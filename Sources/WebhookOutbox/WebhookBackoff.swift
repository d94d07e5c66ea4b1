/// How long a delivery waits between attempts: exponential with full jitter, capped — the
/// ceiling doubles from ``base`` with each failed attempt up to ``cap``, and the wait is drawn
/// evenly from zero to that ceiling, so deliveries that failed together (a receiver that went
/// down) do not come back together. A `Retry-After` the receiver sent is a floor on the wait,
/// honoured up to ``retryAfterLimit``.
public struct WebhookBackoff: Sendable, Equatable {
    /// The ceiling of the wait after the first failed attempt.
    public var base: Duration
    /// The largest ceiling.
    public var cap: Duration
    /// The longest `Retry-After` honoured; a longer one is cut to this.
    public var retryAfterLimit: Duration

    public init(base: Duration = .milliseconds(500), cap: Duration = .seconds(60),
                retryAfterLimit: Duration = .seconds(300)) {
        self.base = base
        self.cap = cap
        self.retryAfterLimit = retryAfterLimit
    }

    /// The wait after `attempt` (1 for the first) failed, with the receiver's `Retry-After`.
    func delay(after attempt: Int, retryAfter: Duration?, using generator: inout some RandomNumberGenerator) -> Duration {
        // 2^20 × any sensible base is far past any sensible cap; the bound keeps the shift finite.
        let ceiling = min(cap, base * (1 << min(max(attempt - 1, 0), 20)))
        let nanoseconds = ceiling.nanoseconds
        var wait = Duration.nanoseconds(nanoseconds > 0 ? Int64.random(in: 0...nanoseconds, using: &generator) : 0)
        if let retryAfter {
            wait = max(wait, min(retryAfter, retryAfterLimit))
        }
        return wait
    }
}
