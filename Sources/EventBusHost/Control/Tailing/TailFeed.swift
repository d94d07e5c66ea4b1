import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation

/// One tailing client's bounded buffer: the bus's delivery loop puts events in, the client's
/// control loop (the session's thread) takes them out in batches and writes them to the socket.
///
/// ## Slow clients: drop with count, announced
/// At most `capacity` events and `byteCapacity` bytes (by ``Event/estimatedBytes``) wait — the
/// count alone let a client that stops reading pin 10 000 events of up to 1 MiB. One event is
/// always taken into an empty buffer, so a budget below the largest event cannot starve a client
/// that keeps up. When the client does not read — the socket's kernel buffer
/// is full and this buffer too — further events are dropped and counted, and one `gap` line
/// (count, first and last sequence) takes their place in the client's stream, exactly where the
/// events are missing. Dropping, not disconnecting: a person tailing through a slow terminal
/// keeps their session and sees how much they missed; a script that cannot afford loss sees the
/// gap line and can re-read with `since_seq`. Either way the bus — and every other client and
/// module — never waits for this client: putting an event in is a lock and an append, plus one
/// wake-up of the control loop when the session was idle (so a burst costs one wake-up).
///
/// ## Threads
/// ``offer(_:)`` is called on the bus's delivery loop only (by ``ControlServer``'s fan-out and
/// by the client's source subscriptions, which deliver there too), so offers are in sequence
/// order — which is what lets it drop duplicates by sequence. ``take(upTo:)`` runs on the
/// control loop's thread. The lock guards what both touch.
final class TailFeed: @unchecked Sendable {
    // @unchecked: the mutable state is behind `lock`; the rest is immutable.

    /// Names the client asked for; events of its own sources (`--files`, `--journal`) are
    /// offered without this check.
    let patterns: [EventPattern]
    /// Live events below this sequence are not wanted (a `since_seq` in the future).
    let fromSequence: UInt64
    /// Field matches and the time window; applied to the client's own sources' events too.
    let filter: TailFilter
    /// Origin hosts wanted (`local`: events without an origin); empty: all.
    let hosts: [String]
    let capacity: Int
    let byteCapacity: Int
    /// Which connection it feeds, for `stats`.
    let client: (id: Int, userID: UInt32, processID: Int32)
    /// Called (outside the lock) when the session should wake up and write.
    private let wake: @Sendable () -> Void

    enum Item {
        /// An event with its ``Event/estimatedBytes``, counted once on the way in.
        case event(Event, bytes: Int)
        case gap(dropped: Int, first: UInt64, last: UInt64, reason: GapReason)

        init(_ event: Event) { self = .event(event, bytes: event.estimatedBytes) }

        /// What the item counts against a batch's bytes (a gap line is short).
        var bytes: Int {
            if case .event(_, let bytes) = self { return bytes }
            return 64
        }
    }

    private struct State {
        /// The replay and the replay-gap notice, ahead of any live event; not bounded (the ring is).
        var replay: [Item] = []
        var replayIndex = 0
        var live: [Item] = []
        var liveIndex = 0
        var liveEvents = 0
        var liveBytes = 0
        /// Index in `live` of the gap notice still collecting drops, if the last item is one.
        var openGap: Int?
        var lastOffered: UInt64 = 0
        /// Every event offered through this sequence has been written to the socket (or its
        /// drop announced there); the replay's end counts as written.
        var writtenThrough: UInt64 = 0
        var scheduled = false
        var delivered: UInt64 = 0
        var dropped: UInt64 = 0
    }

    private let lock = NSLock()
    /// Not checked for exclusive access at run time: every access is under `lock`, which makes
    /// it exclusive, and ``offer(_:bytes:)`` — once per event — touches it about ten times.
    @exclusivity(unchecked) private var state = State()

    init(patterns: [EventPattern], fromSequence: UInt64, filter: TailFilter = TailFilter(), capacity: Int,
         byteCapacity: Int = ControlSettings.defaultClientBufferBytes, hosts: [String] = [], client: (id: Int, userID: UInt32, processID: Int32), wake: @escaping @Sendable () -> Void) {
        self.patterns = patterns
        self.filter = filter
        self.hosts = hosts
        self.client = client
        self.fromSequence = fromSequence
        self.capacity = max(1, capacity)
        self.byteCapacity = max(1, byteCapacity)
        self.wake = wake
    }

    /// Whether the fan-out should offer `event` (its name matches, it is not too old, it passes
    /// the filter).
    @inline(__always)
    func wants(_ event: Event) -> Bool {
        matches(name: event.name) && wantsMatched(event)
    }

    /// Whether the client's patterns take `name`.
    func matches(name: String) -> Bool {
        patterns.contains { $0.matches(name) }
    }

    /// ``wants(_:)`` for an event whose name is known to match (the fan-out's ``FeedRoute``).
    @inline(__always)
    func wantsMatched(_ event: Event) -> Bool {
        event.sequence >= fromSequence
            && (filter.isEmpty || filter.accepts(event))
            && (hosts.isEmpty || hosts.contains(event.fields[EventOrigin.hostField]?.stringValue ?? "local"))
    }

    /// Sets what is sent before the live events. Called once, under the server's lock, before
    /// the feed receives offers.
    func setReplay(_ items: [Item], lastSequence: UInt64) {
        lock.withLock {
            state.replay = items
            state.lastOffered = lastSequence
            state.writtenThrough = lastSequence
        }
    }

    /// Adds a live event of `bytes` (its ``Event/estimatedBytes``), or counts it dropped when the
    /// buffer is full by count or by bytes. Delivery loop only.
    func offer(_ event: Event, bytes: Int) {
        let mustWake = lock.withLock { () -> Bool in
            // The same event can come through the pattern fan-out and a source subscription.
            guard event.sequence > state.lastOffered else { return false }
            state.lastOffered = event.sequence
            if state.liveEvents == 0 || (state.liveEvents < capacity && state.liveBytes + bytes <= byteCapacity) {
                state.live.append(.event(event, bytes: bytes))
                state.liveEvents += 1
                state.liveBytes += bytes
                state.openGap = nil
            } else {
                state.dropped += 1
                if let open = state.openGap, case .gap(let dropped, let first, _, let reason) = state.live[open] {
                    state.live[open] = .gap(dropped: dropped + 1, first: first, last: event.sequence, reason: reason)
                } else {
                    // One notice per run of drops; it may exceed the capacity by one.
                    state.openGap = state.live.count
                    state.live.append(.gap(dropped: 1, first: event.sequence, last: event.sequence, reason: .slowClient))
                }
            }
            if state.scheduled { return false }
            state.scheduled = true
            return true
        }
        if mustWake { wake() }
    }

    /// Asks for a wake-up even without a new event (the replay waits to be written).
    func schedule() {
        let mustWake = lock.withLock { () -> Bool in
            if state.scheduled { return false }
            state.scheduled = true
            return true
        }
        if mustWake { wake() }
    }

    /// Up to `limit` items and about `byteLimit` bytes (at least one item), replay first: the
    /// session encodes a batch whole, so a batch of 1024 events of 900 KB would have been a
    /// 900 MB output buffer. An empty result means the feed is drained and the session goes
    /// idle: the next offer wakes it again.
    func take(upTo limit: Int, bytes byteLimit: Int, into items: inout [Item]) {
        lock.withLock {
            var taken = 0
            func hasRoom() -> Bool { items.count < limit && (items.isEmpty || taken < byteLimit) }
            while hasRoom(), state.replayIndex < state.replay.count {
                // Swapped out, not copied (a copy retains the event once more): not pinned here once taken.
                var item = Item.gap(dropped: 0, first: 0, last: 0, reason: .replay)
                swap(&item, &state.replay[state.replayIndex])
                taken += item.bytes
                items.append(item)
                state.replayIndex += 1
            }
            if state.replayIndex == state.replay.count, !state.replay.isEmpty {
                state.replay = []
                state.replayIndex = 0
            }
            while hasRoom(), state.liveIndex < state.live.count {
                var item = Item.gap(dropped: 0, first: 0, last: 0, reason: .slowClient)
                swap(&item, &state.live[state.liveIndex])
                state.liveIndex += 1
                if case .event(_, let bytes) = item {
                    state.liveEvents -= 1
                    state.liveBytes -= bytes
                }
                taken += item.bytes
                items.append(item)
            }
            if let open = state.openGap, open < state.liveIndex { state.openGap = nil }  // taken: its count is final
            if state.liveIndex == state.live.count {
                state.live.removeAll(keepingCapacity: state.live.count <= 4096)
                state.liveIndex = 0
            } else if state.liveIndex > 4096 && state.liveIndex >= state.live.count - state.liveIndex {
                // Only once what was taken is at least what is left: each item moves at most once
                // on average (a backlog of 100 000 moved whole every four batches cost more than
                // encoding). Taken items wait here until then: at most as many as are queued.
                state.live.removeFirst(state.liveIndex)
                if let open = state.openGap { state.openGap = open - state.liveIndex }
                state.liveIndex = 0
            }
            if items.isEmpty { state.scheduled = false }
        }
    }

    /// Events the session wrote out, for statistics.
    func didDeliver(_ count: Int) {
        lock.withLock { state.delivered += UInt64(count) }
    }

    /// Everything the session took out through `sequence` is in the socket. On the control loop.
    func didWrite(through sequence: UInt64) {
        lock.withLock { state.writtenThrough = max(state.writtenThrough, sequence) }
    }

    /// Whether every event through `sequence` offered to this feed is in the socket: the
    /// written mark has passed it, or everything offered so far is written. (Events through
    /// `sequence` the fan-out has not reached yet are the server's to check.)
    func hasHandedOver(through sequence: UInt64) -> Bool {
        lock.withLock { state.writtenThrough >= min(sequence, state.lastOffered) }
    }

    struct Statistics {
        var delivered: UInt64
        var dropped: UInt64
        var queued: Int
        var queuedBytes: Int
    }

    var statistics: Statistics {
        lock.withLock { Statistics(delivered: state.delivered, dropped: state.dropped, queued: state.liveEvents,
                                     queuedBytes: state.liveBytes) }
    }
}
