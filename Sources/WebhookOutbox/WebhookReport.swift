/// What became of a delivery, told to the outbox's `report` closure as it happens — for the rule
/// engine to post on the bus and count. Called on the outbox's event loop thread, except
/// ``dropped(_:reason:)`` (on the thread that called ``WebhookOutbox/enqueue(_:)``) and
/// ``recovered(count:)`` (on the thread that called ``WebhookOutbox/start()``). Never called
/// under the outbox's lock, so a report may enqueue.
public enum WebhookReport: Sendable {
    /// An attempt began (1 for the first).
    case started(WebhookDelivery, attempt: Int)
    /// A 2xx answer: the delivery is done (a done record in the log). `duration` runs from the first
    /// attempt's start in this life to the answer; `responseTail` is the answer body's last
    /// bytes (up to ``WebhookOutbox/responseTailBytes``), as UTF-8 with invalid bytes replaced.
    case delivered(WebhookDelivery, status: Int, attempts: Int, duration: Duration, responseTail: String)
    /// An attempt failed in a way worth repeating; the next starts after `delay`.
    case retrying(WebhookDelivery, attempt: Int, reason: String, delay: Duration)
    /// Given up: an answer that retrying will not change (a 4xx other than 408 and 429, a 3xx),
    /// or the last of `maxAttempts` failed. It is done in the log too.
    case failed(WebhookDelivery, reason: String, attempts: Int)
    /// Not accepted by ``WebhookOutbox/enqueue(_:)``: the outbox is full, the body too large, the
    /// URL not http(s), the outbox not started or stopped, or the log could not be written. Nothing was stored.
    case dropped(WebhookDelivery, reason: String)
    /// ``WebhookOutbox/start()`` found this many deliveries a previous life left and sends them
    /// (told only when there were some).
    case recovered(count: Int)
}
