@_spi(EventBusHost) import EventBusKit

/// The tailing clients whose name patterns match the last event name the fan-out saw.
///
/// Why: the fan-out runs for every posted event, and matching a name against a client's
/// patterns walks the name's tokens; most traffic is runs of one name (a burst of posts, a
/// source's events), so the match is made once per run of a name rather than per event and per
/// client — as the bus's own routes are cached by name. The feeds' other conditions (sequence,
/// field filter, hosts) are still checked per event.
///
/// Not thread-safe: ``ControlServer`` keeps it under its lock, next to the feeds, and forgets it
/// whenever the feeds change.
struct FeedRoute {
    private var name: String?
    /// The feeds, in the server's order, whose patterns match `name`.
    private(set) var feeds: [TailFeed] = []

    /// Makes ``feeds`` the ones of `all` whose patterns match `name`, unless they already are.
    @inline(__always)
    mutating func route(_ name: String, among all: [TailFeed]) {
        if self.name == name { return }
        self.name = name
        feeds = all.filter { $0.matches(name: name) }
    }
}
