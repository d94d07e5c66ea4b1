/// Durable imports: puts an origin's events back in the order the origin published them when
/// the stream stored one ahead of an earlier one.
///
/// Why: the exporter publishes ahead of acknowledgements (up to 4 096 in flight). When a
/// cluster's stream leader dies, publishes it took but never stored fail only at their
/// acknowledgement deadline (5 s), while later ones reach the new leader and are stored; published
/// again, the earlier ones land behind them (a CI chaos run stored 1 383 of an origin's events
/// behind the next one). No exporter prevents that without waiting for every acknowledgement. So
/// each payload names the sequence of the export published before it (``WireFormat``), and an
/// event whose predecessor this host has not taken in is held until the predecessor comes — it
/// is published again and stored next — and then both are taken, in order.
///
/// Holding is bounded: at most ``limit`` events per origin, none longer than ``patience``. Past
/// either, the origin's held events are taken as they are (a predecessor that comes after all is
/// posted late and counted `out_of_order`): a predecessor the origin gave up, or lost when it was
/// SIGKILLed, never comes. An event of a newer instance of the origin releases the older
/// instance's held events first: that run of the origin has ended.
///
/// Only a consumer that sees all of an origin's events can tell a missing predecessor from one
/// its filter leaves out: the durable importer's reads the whole stream. A payload
/// without a predecessor (`previous` 0: an instance's first export, core mode, an older host) is
/// taken as it comes.
///
/// Threads: the durable importer's thread only.
struct OriginOrder<Item> {
    /// An event's place in its origin's order.
    struct Link: Equatable {
        let host: String
        let instance: UInt64
        let sequence: UInt64
        /// The sequence of the origin's export before it, 0 for none or unknown.
        let previous: UInt64
    }

    struct Entry {
        let link: Link
        let item: Item
    }

    enum Admission {
        /// Take it now, and nothing else: what almost every event gets.
        case next
        /// Take these now, in this order: the event, then any held events it was the
        /// predecessor of (or an older instance's held events, then the event).
        case ready([Entry])
        /// Held until its predecessor comes.
        case held
        /// The same event is held already (the stream stored it twice): drop it.
        case heldAlready
    }

    /// Events held per origin at most: more than nats.c's window of unacknowledged publishes
    /// (4 096), the most that can be stored ahead of an earlier event.
    static var limit: Int { 4_096 + 1_024 }
    /// How long an event is held at most by default: an exporter publishes again what was not
    /// stored within seconds of its acknowledgement deadline (5 s) or its reconnect.
    static var defaultPatience: Duration { .seconds(60) }
    /// How long an event is held at most (``BridgeConfig/Durable/holdPatience``).
    let patience: Duration
    /// What all origins hold at most, in events and bytes: anyone allowed to publish under the
    /// prefix can claim a predecessor that never comes, for as many origins and as large events
    /// as they like. Past either, the origin holding the most bytes is released (``shed()``).
    static var totalLimit: Int { 65_536 }
    static var byteLimit: Int { 64 << 20 }

    private struct Origin {
        /// The last event taken in: the chain's end.
        var instance: UInt64
        var sequence: UInt64
        /// Events of `instance` waiting for their predecessor, by the predecessor's sequence, with
        /// when each came and what holding it costs (counted against ``byteLimit``).
        var held: [UInt64: (entry: Entry, since: ContinuousClock.Instant, bytes: Int)] = [:]
        var heldBytes = 0
    }

    private var origins: [String: Origin] = [:]

    /// Starts from the last event taken in per origin (the import position's record).
    init(last: [String: ImportLedger.Position], patience: Duration = Self.defaultPatience) {
        self.patience = patience
        for (host, position) in last { origins[host] = Origin(instance: position.instance, sequence: position.sequence) }
    }

    /// Events held now, and their bytes, over all origins.
    private(set) var heldCount = 0
    private(set) var heldBytes = 0

    /// Whether more is held than ``totalLimit`` or ``byteLimit`` allow: then ``shed()``.
    var isOverBudget: Bool { heldCount > Self.totalLimit || heldBytes > Self.byteLimit }

    func isHolding(_ host: String) -> Bool { origins[host].map { !$0.held.isEmpty } ?? false }

    /// An arriving event: whether to take it (with what it frees) or hold it. `bytes`, what
    /// holding it would cost, is asked only if it is held.
    mutating func admit(_ link: Link, _ item: Item, bytes: @autoclosure () -> Int, now: ContinuousClock.Instant) -> Admission {
        let entry = Entry(link: link, item: item)
        guard origins[link.host] != nil else {
            origins[link.host] = Origin(instance: link.instance, sequence: link.sequence)
            return .next
        }
        // In place: a copy of an origin holding events would copy what it holds.
        return Self.admit(entry, bytes: bytes, now: now, to: &origins[link.host]!, heldCount: &heldCount, heldBytes: &heldBytes)
    }

    private static func admit(_ entry: Entry, bytes: () -> Int, now: ContinuousClock.Instant, to origin: inout Origin,
                              heldCount: inout Int, heldBytes: inout Int) -> Admission {
        let link = entry.link
        if origin.held.isEmpty, link.instance == origin.instance, link.sequence > origin.sequence,
           link.previous == origin.sequence || link.previous == 0 {
            origin.sequence = link.sequence
            return .next
        }
        let before = (origin.held.count, origin.heldBytes)
        defer {
            heldCount += origin.held.count - before.0
            heldBytes += origin.heldBytes - before.1
        }
        var ready: [Entry] = []
        // At or behind the chain's end (a copy, or late past a release), or unchained: as it comes.
        if (link.instance, link.sequence) <= (origin.instance, origin.sequence) || link.previous == 0 {
            if link.instance > origin.instance { ready = release(&origin) }
            if (link.instance, link.sequence) > (origin.instance, origin.sequence) {
                (origin.instance, origin.sequence) = (link.instance, link.sequence)
            }
            ready.append(entry)
            ready += drain(&origin)
            return .ready(ready)
        }
        if link.instance > origin.instance {
            // A newer run of the origin: the older one has ended, and this one's chain starts anew.
            ready = release(&origin)
            (origin.instance, origin.sequence) = (link.instance, 0)
        }
        if link.previous <= origin.sequence {
            // Its predecessor was taken (or passed over by a release): take it and what follows it.
            origin.sequence = link.sequence
            ready.append(entry)
            ready += drain(&origin)
        } else if let waiting = origin.held[link.previous] {
            // The same event stored twice; another naming the same predecessor contradicts its
            // origin and is taken as it comes.
            guard waiting.entry.link.sequence != link.sequence else { return ready.isEmpty ? .heldAlready : .ready(ready) }
            ready.append(entry)
        } else {
            let cost = bytes()
            origin.held[link.previous] = (entry, now, cost)
            origin.heldBytes += cost
            if origin.held.count > limit { ready += release(&origin) }
        }
        return ready.isEmpty ? .held : .ready(ready)
    }

    /// The held events of origins whose oldest has waited ``patience``, to take now.
    mutating func expired(now: ContinuousClock.Instant) -> [Entry] {
        var ready: [Entry] = []
        for host in Array(origins.keys) where isHolding(host) {
            guard let oldest = origins[host]!.held.values.map(\.since).min(), oldest.duration(to: now) >= patience else { continue }
            ready += releaseAll(host)
        }
        return ready
    }

    /// Releases the origins holding the most bytes until what is held is within the budget;
    /// their held events, to take now in that order.
    mutating func shed() -> [Entry] {
        var ready: [Entry] = []
        while isOverBudget, let host = origins.max(by: { $0.value.heldBytes < $1.value.heldBytes })?.key {
            ready += releaseAll(host)
        }
        return ready
    }

    /// Every held event of `host`, in its order, out of the totals.
    private mutating func releaseAll(_ host: String) -> [Entry] {
        heldCount -= origins[host]!.held.count
        heldBytes -= origins[host]!.heldBytes
        return Self.release(&origins[host]!)
    }

    /// Every held event of `origin`, in the origin's order; the chain ends at the last.
    private static func release(_ origin: inout Origin) -> [Entry] {
        let entries = origin.held.values.map(\.entry).sorted { $0.link.sequence < $1.link.sequence }
        origin.held = [:]
        origin.heldBytes = 0
        if let last = entries.last?.link, (last.instance, last.sequence) > (origin.instance, origin.sequence) {
            (origin.instance, origin.sequence) = (last.instance, last.sequence)
        }
        return entries
    }

    /// The held events that follow the chain's end, one after another.
    private static func drain(_ origin: inout Origin) -> [Entry] {
        var ready: [Entry] = []
        while let next = origin.held.removeValue(forKey: origin.sequence) {
            origin.heldBytes -= next.bytes
            origin.sequence = next.entry.link.sequence
            ready.append(next.entry)
        }
        return ready
    }
}
