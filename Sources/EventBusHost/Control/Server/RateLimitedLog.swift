/// At most one log line per `interval` for a condition that can recur thousands of times a
/// second (a client refused for want of descriptors): the first occurrence is logged at once,
/// later ones are counted and the next line that is let through says how many there were.
///
/// Not thread-safe: the owner keeps it on one thread (the control loop).
struct RateLimitedLog {
    let interval: Duration
    private var lastLogged: ContinuousClock.Instant?
    private var suppressed = 0

    init(interval: Duration) {
        self.interval = interval
    }

    /// Nil: do not log this one (it is counted). Otherwise log, and append the returned text
    /// (empty, or how many were not logged since the last line).
    mutating func record(now: ContinuousClock.Instant = .now) -> String? {
        if let lastLogged, now - lastLogged < interval {
            suppressed += 1
            return nil
        }
        lastLogged = now
        defer { suppressed = 0 }
        return suppressed == 0 ? "" : " (\(suppressed) more since the last report)"
    }
}
