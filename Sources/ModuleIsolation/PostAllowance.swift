/// How many posts an exec module may make now: a token bucket of ``rate`` a second holding at
/// most ``rate`` — pure, time comes in as an argument.
///
/// Why: the program's posts are read on one host thread and posted on the bus, where every
/// matching mailbox and tail takes them. A program posting in a loop would make every other
/// subscriber drop; past its allowance its posts are dropped instead, counted, and said in the
/// log once a second.
struct PostAllowance {
    let rate: Int
    private var tokens: Double
    private var last: UInt64?
    /// Dropped since ``takeDropped(at:)`` last reported, and when it did.
    private var dropped = 0
    private var reportedAt: UInt64 = 0

    init(rate: Int) {
        self.rate = rate
        tokens = Double(rate)
    }

    /// Whether one post at `now` (nanoseconds, monotonic) is allowed; a refused one is counted.
    mutating func take(at now: UInt64) -> Bool {
        if let last, now > last {
            tokens = min(Double(rate), tokens + Double(now - last) * Double(rate) / 1e9)
        }
        last = now
        guard tokens >= 1 else {
            dropped += 1
            return false
        }
        tokens -= 1
        return true
    }

    /// The posts dropped since the last report, when a second has passed since it (else nil):
    /// what the log says, at most once a second.
    mutating func takeDropped(at now: UInt64) -> Int? {
        guard dropped > 0, now &- reportedAt >= 1_000_000_000 || reportedAt == 0 else { return nil }
        defer {
            dropped = 0
            reportedAt = now
        }
        return dropped
    }
}
