/// The protocol state of one control connection, as a value: every decision of a session that
/// does not need the socket, the bus or the clock — when to read, when to write, when a stream
/// ends and why, when to close. It takes what happened (bytes answered, the peer's end of input,
/// a subscription, an event taken, the feed running dry, the host's shutdown) and returns what
/// to do; ``ControlSession`` does the I/O. A unit test drives it with no socket.
///
/// The states:
///
///     idle ──subscribe──▶ streaming ──count / until──▶ finished (close once written)
///       │                    │
///       │                    └──end(reason)──▶ ending ──feed drained / hurry──▶ finished
///       └──peer's end of input, or end(reason)──▶ finished
///
/// and, across them, whether requests are still read (until the peer's end of input) and
/// whether the connection is closed.
///
/// A value owned by one ``ControlSession``, used on the control loop's thread.
struct SessionState: Equatable {
    enum Stream: Equatable {
        /// No subscription: requests are answered one by one.
        case idle
        /// Events flow. `remaining`: events still to send before `end` (a subscription's
        /// `count`); `endWhenDrained`: the window is over once the feed is empty (`until_*`
        /// passed, or `follow: false`).
        case streaming(remaining: Int?, endWhenDrained: Bool)
        /// The host is shutting down: what the feed holds is written, then `end` with `reason`.
        case ending(reason: String, remaining: Int?)
        /// `end` is written (or the client asked nothing more): close once the output is out.
        case finished
    }

    private(set) var stream = Stream.idle
    /// Whether requests are still read (false after the peer's end of input).
    private(set) var readOpen = true
    private(set) var closed = false

    /// Events a batch takes from the feed at most; smaller while the stream ends, so that what
    /// is encoded but not yet taken by the socket stays small and a `hurry` gap line is not
    /// stuck behind much.
    static let batchSize = 1024
    static let endingBatchSize = 64

    var isSubscribed: Bool {
        switch stream {
        case .streaming, .ending: return true
        case .idle, .finished: return false
        }
    }

    /// Closes once the output buffer is written.
    var closesWhenWritten: Bool { stream == .finished }

    // MARK: Reading and writing

    /// Whether to read requests now: not after the end of input, and not while answers wait to
    /// be written (a client that does not read its answers is not read either).
    func readsRequests(outputWaiting: Bool) -> Bool { !closed && readOpen && !outputWaiting }

    /// What epoll should watch the descriptor for (hang-ups are always reported).
    func interest(outputWaiting: Bool) -> UInt32 {
        var wanted: UInt32 = 0
        if readOpen && !outputWaiting { wanted |= System.EventLoop.readable | System.EventLoop.peerClosedWriting }
        if outputWaiting { wanted |= System.EventLoop.writable }
        return wanted
    }

    /// The peer closed its sending side. Nothing subscribed: answer what was asked, then close.
    /// A subscriber may have closed only its sending side; it keeps receiving (a full hang-up
    /// still shows as `EPOLLHUP`).
    mutating func peerEndedInput() {
        readOpen = false
        if stream == .idle { stream = .finished }
    }

    enum AfterWrite: Equatable { case close, watch }

    /// The output buffer is all written.
    func outputWritten() -> AfterWrite { closesWhenWritten ? .close : .watch }

    mutating func close() { closed = true }

    // MARK: Subscribing

    enum SubscribeDecision: Equatable { case proceed, alreadySubscribed, closing }

    /// May a `subscribe` go ahead? One subscription per connection; none once the stream is over.
    func maySubscribe() -> SubscribeDecision {
        switch stream {
        case .idle: return .proceed
        case .streaming, .ending: return .alreadySubscribed
        case .finished: return .closing
        }
    }

    /// The subscription is in place. `windowOver`: its window closed already (nothing will come
    /// after the replay).
    mutating func subscribed(count: Int?, windowOver: Bool) {
        guard stream == .idle else { return }
        stream = .streaming(remaining: count, endWhenDrained: windowOver)
    }

    /// The subscription's `until` time came. Returns whether the stream should be pumped (it
    /// still runs and will end once drained).
    mutating func windowClosed() -> Bool {
        guard case .streaming(let remaining, _) = stream else { return false }
        stream = .streaming(remaining: remaining, endWhenDrained: true)
        return true
    }

    // MARK: The stream

    /// How many events the next batch takes from the feed.
    var batchLimit: Int {
        if case .ending = stream { return Self.endingBatchSize }
        return Self.batchSize
    }

    enum Take: Equatable {
        /// Send it; more may follow.
        case send
        /// Send it; it is the last the subscription's `count` allows.
        case sendLast
        /// The count is reached: nothing more is sent.
        case none
    }

    /// One event is about to be sent: counts it against the subscription's `count`.
    mutating func takeEvent() -> Take {
        switch stream {
        case .streaming(let remaining?, let endWhenDrained):
            guard remaining > 0 else { return .none }
            stream = .streaming(remaining: remaining - 1, endWhenDrained: endWhenDrained)
            return remaining == 1 ? .sendLast : .send
        case .ending(let reason, let remaining?):
            guard remaining > 0 else { return .none }
            stream = .ending(reason: reason, remaining: remaining - 1)
            return remaining == 1 ? .sendLast : .send
        case .streaming, .ending: return .send
        case .idle, .finished: return .none
        }
    }

    enum Drained: Equatable {
        /// Wait: the next event offered to the feed wakes the session.
        case wait
        /// Write `end` with this reason and close.
        case finish(reason: String)
    }

    /// The feed had nothing more to give.
    func feedDrained() -> Drained {
        switch stream {
        case .ending(let reason, _): return .finish(reason: reason)
        case .streaming(_, true): return .finish(reason: "until")
        case .streaming, .idle, .finished: return .wait
        }
    }

    enum EndAction: Equatable {
        /// Already ending, finished or closed: nothing to do.
        case none
        /// Write what the feed holds (stop taking new events), then `end`.
        case drain
        /// Write `end` now.
        case finish(reason: String)
    }

    /// The host ends the session (its shutdown).
    mutating func end(reason: String) -> EndAction {
        guard !closed else { return .none }
        switch stream {
        case .idle: return .finish(reason: reason)
        case .streaming(let remaining, _):
            stream = .ending(reason: reason, remaining: remaining)
            return .drain
        case .ending, .finished: return .none
        }
    }

    /// The reason a `hurry` ends with: only an ending stream hurries.
    var endingReason: String? {
        if case .ending(let reason, _) = stream, !closed { return reason }
        return nil
    }

    /// `end` is written (the count was reached, the window passed, the host shut down, or an
    /// unsubscribed connection ended): close once the output is out.
    mutating func finished() { stream = .finished }
}
