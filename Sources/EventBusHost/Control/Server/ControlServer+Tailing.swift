@_spi(EventBusHost) import EventBusKit
import Foundation

/// The fan-out: every posted event into the replay ring and to each tailing client's
/// ``TailFeed``, and a new subscription's replay joined to the live stream.
extension ControlServer {
    /// The start of a subscription's stream, as the server saw it when the feed joined.
    struct Attachment {
        var oldestSequence: UInt64
        var newestSequence: UInt64
        /// When the oldest held event was posted (nil: none held).
        var oldestTime: Date?
        /// A `since_time` replay that cannot be whole: events posted after that time were
        /// already evicted from the ring (how many is not known, so no gap count is invented).
        var replayIncomplete: Bool
    }

    /// Registers `feed` for live events and gives it its replay — under one lock with the
    /// fan-out, so the replay ends exactly where the live events begin. On the loop.
    func attach(_ feed: TailFeed, since: UInt64?, last: Int?) -> Attachment {
        lock.withLock {
            var items: [TailFeed.Item] = []
            if let since {
                let lostUpTo = ring.oldestSequence - 1
                if since <= lostUpTo {
                    items.append(.gap(dropped: Int(lostUpTo - since + 1), first: since, last: lostUpTo, reason: .replay))
                }
                items += ring.events(from: since, where: feed.wants).map(TailFeed.Item.init)
            } else if feed.filter.since != nil {
                items = ring.events(from: 1, where: feed.wants).map(TailFeed.Item.init)
            } else if let last, last > 0 {
                items = ring.last(last, where: feed.wants).map(TailFeed.Item.init)
            }
            feed.setReplay(items, lastSequence: ring.newestSequence)
            feeds.append(feed)
            let incomplete = feed.filter.since.map { since in ring.newestEvictedTime.map { $0 >= since } ?? false } ?? false
            return Attachment(oldestSequence: ring.oldestSequence, newestSequence: ring.newestSequence,
                              oldestTime: ring.oldestTime, replayIncomplete: incomplete)
        }
    }

    /// Stops offering events to `feed`. On the loop.
    func detach(_ feed: TailFeed) {
        lock.withLock { feeds.removeAll { $0 === feed } }
    }

    /// Whether every tailing client has been handed every event through `sequence` it wants:
    /// the fan-out has come that far and each feed has written them to its socket (whose bytes
    /// the client can still read if this process is SIGKILLed), or announced them dropped.
    /// The bus's hand-out check while the server runs (``Bus/hasHandedOut(through:)``). Any thread.
    func handedToEveryTail(through sequence: UInt64) -> Bool {
        lock.withLock { fannedOut >= sequence && feeds.allSatisfy { $0.hasHandedOver(through: sequence) } }
    }

    /// A client's own source delivered `event` (on the bus's delivery loop). An event a source
    /// posts only to a joining subscriber — its own snapshot, or a units watch's gap — reaches
    /// no other subscriber, the fan-out included; counted here, its number does not hold a
    /// shutdown's ``waitForDelivery(upTo:until:)`` until the deadline.
    func delivered(_ event: Event) {
        lock.withLock { fannedOut = max(fannedOut, event.sequence) }
    }

    /// The fan-out: on the bus's delivery loop, for every posted event.
    func deliver(_ event: Event) {
        lock.lock()
        fannedOut = max(fannedOut, event.sequence)
        let bytes = event.estimatedBytes
        let evicted = ring.append(event, bytes: bytes)
        feedRoute.route(event.name, among: feeds)
        for feed in feedRoute.feeds where feed.wantsMatched(event) {
            feed.offer(event, bytes: bytes)
        }
        let checkTrim = evicted > 0 && heapTrim.release(evicted)
        lock.unlock()
        if checkTrim { loop.execute { [self] in loop.after(HeapTrim.quiet) { [self] in trimWhenSettled() } } }
    }
}
