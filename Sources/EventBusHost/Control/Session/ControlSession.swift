import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import SystemCalls

/// One client connection of the control socket: the thin I/O side of a ``SessionState``.
///
/// The session reads bytes, cuts them into lines (``RequestFraming``), hands each request to its
/// handler (`ControlSession+Requests.swift`), writes what is answered, and pumps its
/// subscription's events (`ControlSession+Stream.swift`). What to do when — read or not, which
/// epoll interest, when a stream ends, when to close — the ``SessionState`` value decides; this
/// file only carries it out.
///
/// ## Threads
/// Everything here runs on the server's ``System.EventLoop`` thread: reading and answering requests,
/// encoding the events of its ``TailFeed`` and writing them. The bus's delivery loop only
/// offers events to the feed, which asks the loop to ``pump()`` when the session was idle. So
/// the state below needs no lock, and a client that stops reading stalls nobody: its socket is
/// simply not written until epoll says it is writable again.
///
/// ## The peer's hang-up
/// The descriptor is watched for `EPOLLRDHUP` with reading, and `EPOLLHUP`/`EPOLLERR` always —
/// also while a tail only writes and while reading is paused. A peer that closed its whole
/// connection (exited, was killed) ends the session at once: descriptor, session, feed and the
/// file or journal sources it opened are released then, not when the next matching event
/// fails to write. A peer that closed only its sending side (`shutdown(SHUT_WR)`) keeps
/// receiving its stream.
///
/// ## Output
/// Response lines and event lines share one byte buffer, written with one `send` per batch.
/// While the socket does not take more, the session stops taking events from its feed — they
/// wait there, bounded, and then drop with a gap line. An idle connection holds no output
/// buffer.
final class ControlSession: LoopWatcher, @unchecked Sendable {
    // @unchecked: mutable state is confined to the loop's thread. The members below are the
    // session's own; they are internal only so that its extensions (one file per role) reach them.

    let id: Int
    let fd: Int32
    let peer: System.StreamSocket.Peer
    unowned let server: ControlServer

    var state = SessionState()
    var framing = RequestFraming()
    /// What epoll watches the descriptor for now.
    var interest: UInt32 = 0
    var out = JSONWriter(capacity: 0)
    var written = 0  // bytes of `out` already sent
    /// Events encoded into `out` since it was last empty: what a forced close loses at most.
    var eventsInOutput = 0
    /// The sequence of the last event or gap put in the output: once the output is written,
    /// the feed has handed the client everything through it (``TailFeed/didWrite(through:)``).
    var encodedThrough: UInt64 = 0
    var encoder = EventJSON()
    var batch: [TailFeed.Item] = []
    var feed: TailFeed?
    var sourceSubscriptions: [AnyCancellable] = []
    /// Event names this client posted that passed validation: a script posts a few names many
    /// times, and validating one costs more than the rest of its post (about half of the
    /// control loop's time in `post --stdin`). Bounded; emptied when full.
    var validNames = Set<String>()
    /// A non-root client's recursive file watch: events under directories it may not search are
    /// not shown to it (the watch runs with eventbusd's access).
    var filtersPaths = false

    var closed: Bool { state.closed }

    init(id: Int, fd: Int32, peer: System.StreamSocket.Peer, server: ControlServer) {
        self.id = id
        self.fd = fd
        self.peer = peer
        self.server = server
    }

    var loop: System.EventLoop { server.loop }

    /// Registers with the loop and greets the client. On the loop.
    func start() throws(System.CallError) {
        interest = state.interest(outputWaiting: false)
        try loop.add(fd, events: interest, watcher: self)
        greet()
        flush()
    }

    func ready(_ events: UInt32) {
        guard !closed else { return }
        if events & (System.EventLoop.readable | System.EventLoop.peerClosedWriting | System.EventLoop.hangUp) != 0,
           state.readsRequests(outputWaiting: outputWaiting) {
            readAvailable()
            if closed { return }
        }
        if events & (System.EventLoop.hangUp | System.EventLoop.failed) != 0 {
            // The peer closed its whole connection (or it failed): nothing written reaches it.
            server.logger.debug("control client \(id) hung up")
            close()
            return
        }
        if events & System.EventLoop.writable != 0 { pump() }
    }

    // MARK: Reading

    var outputWaiting: Bool { written < out.bytes.count }

    private func readAvailable() {
        // A few reads per wake-up, so one client that floods requests does not keep the loop
        // from others (epoll reports it again while data waits).
        for _ in 0..<8 {
            if outputWaiting { break }  // reading waits until the answers are out
            let result: System.StreamSocket.ReadResult
            do {
                result = try server.readBuffer.withUnsafeMutableBytes { buffer throws(System.CallError) in
                    try System.StreamSocket.read(fd, into: buffer, "control client")
                }
            } catch {
                server.logger.debug("control client \(id): \(error)")
                close()
                return
            }
            switch result {
            case .bytes(let count):
                server.readBuffer.withUnsafeBufferPointer { received in
                    framing.append(UnsafeBufferPointer(rebasing: received[0..<count])) { line in
                        switch line {
                        case .request(let bytes): handle(line: bytes)
                        case .tooLong:
                            error(ControlError(.lineTooLong, "a request line is limited to \(ControlProtocol.maximumLineLength) bytes; this one is ignored"), id: nil)
                        }
                        return !closed
                    }
                }
                if closed { return }
                flush()
                if closed { return }
            case .wouldBlock:
                updateInterest()
                return
            case .end:
                state.peerEndedInput()
                framing.reset()
                flush()
                if !closed { updateInterest() }
                return
            }
        }
        updateInterest()
    }

    /// Watches for what the session can use now (``SessionState/interest(outputWaiting:)``).
    func updateInterest() {
        guard !closed else { return }
        let wanted = state.interest(outputWaiting: outputWaiting)
        if wanted != interest {
            interest = wanted
            loop.modify(fd, events: wanted)
        }
    }

    // MARK: Writing

    /// Writes what the output buffer holds. True when all of it went out; false when the socket
    /// is full (writability is watched) or the session closed.
    @discardableResult
    func flush() -> Bool {
        guard !closed else { return false }
        while written < out.bytes.count {
            let result: System.StreamSocket.WriteResult
            do {
                result = try out.bytes.withUnsafeBytes { all throws(System.CallError) in
                    try System.StreamSocket.write(fd, UnsafeRawBufferPointer(rebasing: all[written...]), "control client")
                }
            } catch {
                server.logger.debug("control client \(id): \(error)")
                close()
                return false
            }
            switch result {
            case .wrote(let count):
                written += count
            case .wouldBlock:
                updateInterest()
                return false
            case .closed:
                close()
                return false
            }
        }
        // A tail keeps a buffer of a batch's size; a connection that only asks keeps none.
        if feed == nil || out.bytes.capacity > 256 * 1024 {
            out = JSONWriter(capacity: 0)
        } else {
            out.bytes.removeAll(keepingCapacity: true)
        }
        written = 0
        eventsInOutput = 0
        if encodedThrough > 0 { feed?.didWrite(through: encodedThrough) }
        switch state.outputWritten() {
        case .close:
            close()
            return false
        case .watch:
            updateInterest()
            return true
        }
    }

    // MARK: Closing

    func cancelSources() {
        sourceSubscriptions.forEach { $0.cancel() }
        sourceSubscriptions = []
    }

    func detachFeed() {
        guard let feed else { return }
        server.detach(feed)
        cancelSources()
        self.feed = nil
        batch = []
    }

    /// Closes at once, whatever is unwritten; returns how many events were queued or unsent
    /// (at most: the output buffer may be partly read). On the loop.
    func forceClose() -> Int {
        guard !closed else { return 0 }
        let lost = (feed?.statistics.queued ?? 0) + (written < out.bytes.count ? eventsInOutput : 0)
        close()
        return lost
    }

    /// Releases everything at once: feed, sources, descriptor, the server's entry.
    func close() {
        guard !closed else { return }
        state.close()
        let released = out.bytes.capacity + (feed?.statistics.queuedBytes ?? 0)
        detachFeed()
        loop.remove(fd)
        System.StreamSocket.close(fd)
        out = JSONWriter(capacity: 0)
        framing.reset()
        server.remove(self, released: released)
    }
}
