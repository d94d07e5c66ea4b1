@_spi(EventBusHost) import EventBusKit

/// `all_of` with `within`: the newest event of each pattern, kept while younger than the
/// window; once every pattern has one, they go out together (in the order they were seen) and
/// the join starts empty again. An event that matches several patterns fills each of them.
/// Runs on the rule's queue; time is the events' monotonic clock, so nothing polls.
struct AllOfJoin {
    let patterns: [EventPattern]
    let window: UInt64
    private var latest: [Event?]

    init(patterns: [EventPattern], within window: Duration) {
        self.patterns = patterns
        self.window = UInt64(window.clampedNanoseconds)
        self.latest = Array(repeating: nil, count: patterns.count)
    }

    mutating func add(_ event: Event) -> [Event]? {
        for (index, pattern) in patterns.enumerated() where pattern.matches(event.name) { latest[index] = event }
        let now = event.monotonicNanoseconds
        for index in latest.indices {
            if let kept = latest[index], now &- kept.monotonicNanoseconds > window { latest[index] = nil }
        }
        guard latest.allSatisfy({ $0 != nil }) else { return nil }
        var joined: [Event] = []
        for case let kept? in latest where !joined.contains(where: { $0.sequence == kept.sequence && kept.sequence != 0 }) {
            joined.append(kept)
        }
        latest = Array(repeating: nil, count: patterns.count)
        return joined.sorted { ($0.monotonicNanoseconds, $0.sequence) < ($1.monotonicNanoseconds, $1.sequence) }
    }
}
