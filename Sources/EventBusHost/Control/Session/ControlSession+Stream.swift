import ControlProtocol
@_spi(EventBusHost) import EventBusKit

/// A session's subscription stream: moving events from its ``TailFeed`` to the socket, and
/// ending the stream (its `count`, its window, the host's shutdown). On the loop's thread.
extension ControlSession {
    /// A batch stops at the first event that reaches this many (estimated) bytes: the output
    /// buffer of a client that does not read holds about this much, not 1024 large events.
    static let batchBytes = 256 * 1024
    /// Batches written per wake-up before the loop serves other clients.
    static let batchesPerTurn = 16

    /// Moves events from the feed to the socket, a batch at a time, until the feed is empty or
    /// the socket is full (then epoll reports writability and this runs again). After
    /// ``batchesPerTurn`` batches it yields the loop to other clients and comes back.
    func pump() {
        guard !closed else { return }
        guard flush() else { return }
        var turns = 0
        while let feed {
            if turns == Self.batchesPerTurn {
                loop.execute { [self] in pump() }
                return
            }
            turns += 1
            batch.removeAll(keepingCapacity: true)
            feed.take(upTo: state.batchLimit, bytes: Self.batchBytes, into: &batch)
            if batch.isEmpty {
                // The feed went idle; the next offer wakes us — unless the stream is ending.
                if case .finish(let reason) = state.feedDrained() { finish(reason: reason) }
                return
            }
            if out.bytes.capacity < 64 * 1024 { out.bytes.reserveCapacity(64 * 1024) }
            var delivered = 0
            var countReached = false
            var windowOver = false
            // The batch is encoded into locals moved out of the session and back (no copy): each
            // access to a member of this class is checked for exclusivity at run time, per event.
            var lines = out
            out = JSONWriter(capacity: 0)
            var encoder = self.encoder
            self.encoder = EventJSON()  // so the local's line buffer is not shared (and copied on write)
            let filtersPaths = self.filtersPaths
            // Each item is moved out of the batch, not copied: a copy retains the event once
            // more and the batch's clearing releases it again — two atomic operations on memory
            // the posting thread last wrote, for every event.
            var items = batch
            batch = []
            for index in items.indices {
                var item = TailFeed.Item.gap(dropped: 0, first: 0, last: 0, reason: .slowClient)
                swap(&item, &items[index])
                switch item {
                case .event(let event, _):
                    encodedThrough = event.sequence
                    if feed.filter.endsBefore(event) {
                        windowOver = true
                        break
                    }
                    if filtersPaths, event.source.hasPrefix("files:"), case .string(let path)? = event.fields["path"],
                       !PeerAccess.mayReach(path, by: peer) {
                        continue
                    }
                    encoder.event(event, into: &lines)
                    delivered += 1
                    if state.takeEvent() == .sendLast { countReached = true }
                case .gap(let dropped, let first, let last, let reason):
                    lines.gapLine(dropped: dropped, first: first, last: last, reason: reason)
                    encodedThrough = max(encodedThrough, last)
                }
                if countReached || windowOver { break }
            }
            out = lines
            self.encoder = encoder
            items.removeAll(keepingCapacity: true)  // what a `count` or window end left unencoded
            batch = items
            eventsInOutput += delivered
            feed.didDeliver(delivered)
            if countReached || windowOver {
                finish(reason: countReached ? "count" : "until")
                return
            }
            guard flush() else { return }
        }
    }

    /// Ends the session from the host's side (shutdown): what its feed holds is written, then an
    /// `end` line with `reason`, then it closes. On the loop.
    func end(reason: String) {
        switch state.end(reason: reason) {
        case .none: return
        case .drain:
            if let feed { server.detach(feed) }
            cancelSources()
            pump()
        case .finish(let reason):
            finish(reason: reason)
        }
    }

    /// The shutdown's time is nearly up: what the feed still holds is not written but announced
    /// in one `gap` line (reason `shutdown`), then `end`. Returns the events given up. On the loop.
    func hurry() -> (count: Int, first: UInt64, last: UInt64)? {
        guard let feed, let reason = state.endingReason else { return nil }
        var given: (count: Int, first: UInt64, last: UInt64)?
        var run: (count: Int, first: UInt64, last: UInt64)?
        func announceRun() {
            guard let current = run else { return }
            out.gapLine(dropped: current.count, first: current.first, last: current.last, reason: .shutdown)
            given = given.map { ($0.count + current.count, $0.first, current.last) } ?? current
            run = nil
        }
        batch.removeAll(keepingCapacity: true)
        feed.take(upTo: .max, bytes: .max, into: &batch)
        for item in batch {
            switch item {
            case .event(let event, _):
                // A subscription's `count` bounds what it would have got, and so what it lost.
                guard state.takeEvent() != .none else { break }
                run = run.map { ($0.count + 1, $0.first, event.sequence) } ?? (1, event.sequence, event.sequence)
            case .gap(let dropped, let first, let last, let reason):
                announceRun()
                out.gapLine(dropped: dropped, first: first, last: last, reason: reason)
            }
        }
        announceRun()
        batch.removeAll(keepingCapacity: true)
        finish(reason: reason)
        return given
    }

    /// Writes `end` with `reason`, lets go of the feed, and closes once the output is written.
    func finish(reason: String) {
        respond(StreamEnd.json(reason: reason), id: nil)
        detachFeed()
        state.finished()
        flush()
    }
}
