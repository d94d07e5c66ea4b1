import ControlProtocol
@_spi(EventBusHost) import EventBusKit
import Foundation

/// Client posts, and the shutdown that stops them: refusing posts and what else a stopping host
/// leaves to the next, waiting for the fan-out to catch up, and ending every session with what
/// its feed holds.
extension ControlServer {
    /// The first step of a shutdown: from now on a client's post is answered `shutting_down`.
    /// Returns the newest sequence acknowledged to anyone (client or not) before that: what
    /// ``waitForDelivery(upTo:until:)`` waits for. On the host's control queue.
    @discardableResult
    func refusePosts() -> UInt64 {
        postGate.withLock { postsRefused = true }
        return bus.statistics.posted
    }

    /// Also a first step of a shutdown: from now on `status` and `stats` report `stopping`
    /// (``StoppingReport``), and what the next host should serve is refused
    /// (``refusalWhileStopping(_:)``). Clients are still accepted — a `status` asked during a
    /// long shutdown is answered, not left in the backlog — until ``stop(within:)`` closes the
    /// socket; with socket activation the clients that connect after that wait in its backlog
    /// for the next eventbusd. On the host's control queue.
    func beginStopping(_ shutdown: ShutdownProgress) {
        lock.withLock { stopping = shutdown }
    }

    /// The refusal of a request a stopping host does not take, nil for one it answers. A new
    /// subscription would end within the shutdown and a listing's watch is stopping; a reload
    /// would configure a host on its way out — each is the next host's to serve, and
    /// `shutting_down` is what clients take as "ask again" (the CLI does, within its patience).
    /// Posts are refused by ``post(_:)`` itself. Any thread.
    func refusalWhileStopping(_ op: ControlRequest.Op) -> ControlError? {
        switch op {
        case .subscribe, .listing, .reload:
            guard lock.withLock({ stopping != nil }) else { return nil }
            return ControlError(.shuttingDown, "eventbusd is shutting down and takes no new \(op.rawValue); ask the next one (eventbus does, while it waits for the restart)")
        case .post, .status, .modules, .rules, .stats, .metrics:
            return nil
        }
    }

    /// Posts a client's event, unless the host is shutting down (nil). Any thread.
    func post(_ event: Event) -> UInt64? {
        postGate.withLock { () -> UInt64? in
            guard !postsRefused else { return nil }
            let sequence = bus.post(event)
            return sequence > 0 ? sequence : nil
        }
    }

    /// Posts a client's batch in order as one bus batch (contiguous sequence numbers, one wake-up
    /// of the delivery loop) under one hold of the gate; returns the sequence numbers — all of
    /// them, or none when the shutdown has begun refusing (or the bus has finished). Any thread.
    func post(contentsOf events: [Event]) -> [UInt64] {
        postGate.withLock { () -> [UInt64] in
            guard !postsRefused else { return [] }
            return Array(bus.post(contentsOf: events))
        }
    }

    /// Waits until the bus's delivery loop has handed every event up to `sequence` to its
    /// subscribers (the fan-out to tails is one of them), or `deadline` passed. Returns whether
    /// it got there. On the host's control queue.
    @discardableResult
    func waitForDelivery(upTo sequence: UInt64, until deadline: ContinuousClock.Instant) -> Bool {
        guard fanOut != nil else { return true }  // not started (or stopped): nothing to wait for
        while lock.withLock({ fannedOut < sequence }) {
            if ContinuousClock.now >= deadline { return false }
            Thread.sleep(forTimeInterval: 0.001)
        }
        return true
    }

    /// Stops accepting, removes the socket file, and ends every session: each writes what its
    /// feed holds (everything posted until now: the fan-out is drained first), then an `end`
    /// line (reason `shutdown`). A client that has not read it all when `timeout` is nearly up
    /// gets what is left announced in a `gap` line (reason `shutdown`) instead; one that does
    /// not read even that is disconnected, and the log says how many events it lost. On the
    /// host's control queue.
    func stop(within timeout: Duration) {
        guard let loop else { return }  // never started
        let deadline = ContinuousClock.now + timeout
        let posted = refusePosts()
        if !waitForDelivery(upTo: posted, until: deadline) {
            logger.warning("control socket: the bus had not delivered up to event #\(posted) when the shutdown's time was up")
        }
        bus.setHandOutCheck(nil)
        fanOut?.cancel()
        fanOut = nil
        let sessions = lock.withLock { () -> [ControlSession] in
            stopped = true
            return Array(roster.clients.values)
        }
        if let boundPath { System.StreamSocket.unlink(boundPath) }
        loop.execute { [self] in
            listener.close()
            for session in sessions { session.end(reason: "shutdown") }
        }
        // Most of the time for writing; the last fifth for the gap notices of slow readers.
        let hurryAt = deadline - timeout / 5
        while ContinuousClock.now < hurryAt, lock.withLock({ roster.count > 0 }) {
            Thread.sleep(forTimeInterval: 0.005)
        }
        let slow = lock.withLock { Array(roster.clients.values) }
        if !slow.isEmpty {
            let logger = logger
            loop.execute {
                for session in slow {
                    if let given = session.hurry() {
                        logger.warning("control client \(session.id) (uid \(session.peer.userID), pid \(session.peer.processID)) did not read its stream in time: \(given.count) event(s) #\(given.first)-#\(given.last) announced as lost (gap line, reason shutdown)")
                    }
                }
            }
        }
        while ContinuousClock.now < deadline, lock.withLock({ roster.count > 0 }) {
            Thread.sleep(forTimeInterval: 0.005)
        }
        let stuck = lock.withLock { Array(roster.clients.values) }
        if !stuck.isEmpty {
            let logger = logger
            loop.execute {
                var lost = 0
                for session in stuck { lost += session.forceClose() }
                logger.warning("\(stuck.count) control client(s) did not take their last lines within \(timeout); disconnected, up to \(lost) event(s) unwritten")
            }
        }
    }
}
