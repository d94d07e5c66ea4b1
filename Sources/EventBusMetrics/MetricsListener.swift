import Foundation
import Synchronization
import SystemCalls

/// Serves `GET /metrics` over plain HTTP/1.1 for Prometheus, on the host's event loop.
///
/// Why our own and not SwiftNIO: the whole job is one GET, one answer, close — about the size
/// of this file — while NIO would add its event loops and a dozen modules to a host that
/// already runs an epoll loop of its own for the control socket. It faces the network, so
/// what a client sends is bounded and nothing it does can hold the host:
/// - a connection that has sent nothing is not accepted: the kernel keeps it for
///   ``Limits/silenceBeforeAccept`` or until its first bytes come. An HTTP client speaks
///   first, so a scraper is accepted with its head, never queued behind idle connections, and
///   idle ones cost neither a descriptor nor a place (one handed over silent after that time
///   has had its grace);
/// - at most ``Limits/maxConnections`` at once, each given ``Limits/headGrace`` to send a
///   whole request head before it can lose its place. When a new connection waits and the
///   table is full, the oldest connection past its grace without a whole head is closed to
///   make room for it (a table held by idle or slowloris ones would otherwise answer every
///   scraper `503`: 16 idle sockets that reconnect when closed got a scraper 0 answers of
///   40). While every connection without a head is within its grace, new ones are not
///   accepted: they wait in the kernel's backlog until the first grace ends. Closing the
///   oldest for every newcomer let a flood that reconnects the moment it is closed cycle the
///   table as fast as two threads could run (8 000–15 000 connections a second), and
///   a client starved between its connect and its send on a loaded machine was closed as one
///   of them; with the grace, a flood costs at most ``Limits/maxConnections`` connections per
///   grace and every accepted client has its grace — the price is that a scraper waits behind
///   the flood's connections in the backlog, a grace per ``Limits/maxConnections`` of them.
///   Only when every place is being answered is a new one answered `503` and closed;
/// - a new connection's head is read as soon as it is accepted and answered then;
/// - a request head is at most ``Limits/maxRequestBytes`` (else `431`); a body is not read;
/// - the head must be whole within ``Limits/headTimeout`` (slowloris), and each connection
///   has ``Limits/timeout`` in all, to send its request and read the answer; a slow or silent
///   client is closed at its deadline.
/// - anything but `GET`/`HEAD` gets `405`, a malformed request line `400`, another path `404`;
///   every answer carries `Connection: close`.
///
/// ## Threads
/// Everything after ``start(on:)`` runs on the loop's thread: accepting, reading heads,
/// rendering and writing answers (a scrape waits for the one before), and the deadlines, as loop
/// timers. ``init(address:limits:render:)`` binds (so an address in use is an error at start);
/// ``start(on:)`` and ``stop()`` come from one other thread (the host's control queue), never
/// the loop's. ``start()`` runs it on a loop of its own, which ``stop()`` ends.
public final class MetricsListener: LoopWatcher, @unchecked Sendable {
    // @unchecked: `connections`, `acceptPausedUntil`, `listening`, `resumeAt` and `stopped` are
    // the loop thread's once started; `loop` is set once by start, before the loop first reads
    // it; `ownLoop` is the caller's.

    public struct Limits: Sendable {
        public var maxConnections = 64
        public var maxRequestBytes = 8 * 1024
        /// How long a connection that has sent nothing stays with the kernel before it is
        /// accepted (`TCP_DEFER_ACCEPT`, whole seconds, which Linux rounds up to its SYN-ACK
        /// retransmissions: 30 s is about 31 s). An HTTP client speaks first, so a scraper is
        /// accepted the moment its head arrives and is never queued behind idle connections;
        /// an idle one costs a small kernel entry — no descriptor, place or wake-up of the
        /// loop — until then, or for good if the kernel drops it. A flood beyond the backlog
        /// meets SYN cookies instead, which keep no state to defer with.
        public var silenceBeforeAccept: Duration = .seconds(30)
        /// From accept, the time a connection keeps its place while it has not sent a whole
        /// request head. A scraper's head comes with its first segment, which is when the
        /// kernel lets it be accepted, so this matters for partial heads: it bounds what a
        /// reconnecting flood of them costs (``maxConnections`` accepts per grace) and how long
        /// a scraper waits behind one in the backlog (a grace per ``maxConnections`` of them).
        /// A connection handed over with nothing to read when ``silenceBeforeAccept`` is up has
        /// had its grace.
        public var headGrace: Duration = .milliseconds(500)
        /// From accept to the end of the request head: a scraper sends its head at once.
        public var headTimeout: Duration = .seconds(2)
        public var timeout: Duration = .seconds(5)
        public init() {}
    }

    /// Requests answered, by how: what `eventbus_metrics_http_requests_total` reports.
    public struct Statistics: Sendable, Equatable {
        public var scrapes: UInt64 = 0
        public var rejected: UInt64 = 0
        /// Closed without a whole request head: at a deadline, or past its grace for a newer
        /// connection while the table was full.
        public var timedOut: UInt64 = 0

        public init(scrapes: UInt64 = 0, rejected: UInt64 = 0, timedOut: UInt64 = 0) {
            self.scrapes = scrapes
            self.rejected = rejected
            self.timedOut = timedOut
        }
    }

    public let address: ListenAddress
    public let limits: Limits
    private let render: @Sendable () -> [UInt8]
    private let listener: Int32
    private var loop: System.EventLoop?
    /// Made by ``start()``, ended by ``stop()``.
    private var ownLoop: System.EventLoop?
    private var connections: [Connection] = []
    /// Set when accepting ran out of descriptors: the listener is not watched until then.
    private var acceptPausedUntil: ContinuousClock.Instant?
    /// Whether the listening socket is watched for newcomers now.
    private var listening = false
    /// When a timer will look at the listener again, while it is not watched.
    private var resumeAt: ContinuousClock.Instant?
    private var stopped = false
    private let counts = Mutex(Statistics())

    /// One client: its socket is watched on the loop (readable until it is answered, then
    /// writable), and the listener serves it.
    fileprivate final class Connection: LoopWatcher {
        /// -1 once closed.
        var fd: Int32
        unowned let owner: MetricsListener
        let accepted: ContinuousClock.Instant
        /// The end of the whole exchange.
        let deadline: ContinuousClock.Instant
        /// The end of the head's time; `deadline` once it is answered.
        let headDeadline: ContinuousClock.Instant
        /// Until then it keeps its place without a head (``Limits/headGrace``).
        var graceEnd: ContinuousClock.Instant
        var request: [UInt8] = []
        var output: [UInt8] = []
        var written = 0
        var answered: Bool { !output.isEmpty }
        var currentDeadline: ContinuousClock.Instant { answered ? deadline : headDeadline }

        init(fd: Int32, owner: MetricsListener, accepted: ContinuousClock.Instant, limits: Limits) {
            self.fd = fd
            self.owner = owner
            self.accepted = accepted
            self.deadline = accepted + limits.timeout
            self.headDeadline = accepted + min(limits.headTimeout, limits.timeout)
            self.graceEnd = min(accepted + limits.headGrace, headDeadline)
        }

        func ready(_ events: UInt32) {
            owner.serve(self)
            owner.updateListener()
        }
    }

    /// Binds `address` and listens; ``start(on:)`` begins answering. `render` makes the text of
    /// one scrape, on the loop's thread.
    public init(address: ListenAddress, limits: Limits = Limits(),
                render: @escaping @Sendable () -> [UInt8]) throws(MetricsListenerError) {
        self.address = address
        self.limits = limits
        self.render = render
        do {
            // A deep backlog: a connect that finds it full is retried by the client a second later.
            listener = try System.StreamSocket.listen(host: address.host, port: address.port, ipv6: address.family == .ipv6,
                                                      deferAccept: Int32(clamping: limits.silenceBeforeAccept.components.seconds),
                                                      backlog: 1024)
        } catch {
            throw .system(error, address)
        }
    }

    deinit {
        System.StreamSocket.close(listener)
    }

    public var statistics: Statistics { counts.withLock { $0 } }

    /// Answers on `loop` (running) from now on.
    public func start(on loop: System.EventLoop) {
        precondition(self.loop == nil, "a metrics listener starts once")
        self.loop = loop
        loop.execute { [self] in
            guard !stopped else { return }
            updateListener()
        }
    }

    /// Answers on a loop of its own (thread `eventbus-metrics`), which ``stop()`` ends.
    public func start() throws(System.CallError) {
        let loop = try System.EventLoop(name: "eventbus-metrics")
        loop.start()
        ownLoop = loop
        start(on: loop)
    }

    /// Closes every connection and the listening socket's watch; returns once the loop has
    /// done it. Not on the loop's thread.
    public func stop() {
        guard let loop else { return }
        let done = DispatchSemaphore(value: 0)
        loop.execute { [self] in
            stopped = true
            if listening { loop.remove(listener) }
            listening = false
            for connection in connections { finish(connection) }
            connections.removeAll()
            done.signal()
        }
        done.wait()
        ownLoop?.stopAndWait()
        ownLoop = nil
    }

    // MARK: On the loop's thread

    /// The listening socket: newcomers wait.
    public func ready(_ events: UInt32) {
        acceptWaiting()
        updateListener()
    }

    /// Watches the listener while a newcomer can be accepted — into a free place, into the place
    /// of one past its grace, or (every place being answered) to be answered `503` — and
    /// otherwise looks again when that changes: at the end of a pause for descriptors, when the
    /// first grace ends, or when a place frees up (each connection's event ends here).
    fileprivate func updateListener() {
        guard !stopped, let loop else { return }
        let now = ContinuousClock.now
        if let until = acceptPausedUntil, until <= now { acceptPausedUntil = nil }
        let fullUntil = acceptPausedUntil == nil ? graceToWaitFor(now) : nil
        let accepting = acceptPausedUntil == nil && fullUntil == nil
        if accepting != listening {
            // Not watched while nothing can be accepted: the listener is readable as long as a
            // client waits, and would wake the loop at once, forever.
            if accepting {
                do { try loop.add(listener, events: System.EventLoop.readable, watcher: self) } catch { return }
            } else {
                loop.remove(listener)
            }
            listening = accepting
        }
        if let look = acceptPausedUntil ?? fullUntil, resumeAt.map({ look < $0 }) ?? true {
            resumeAt = look
            loop.after(look - now) { [weak self] in
                guard let self, self.resumeAt == look else { return }
                self.resumeAt = nil
                self.updateListener()
            }
        }
    }

    /// Accepts what waits, at most ``Limits/maxConnections`` per round: a flood of connects
    /// must not keep the loop from reading the heads of those it has.
    private func acceptWaiting() {
        for _ in 0..<max(1, limits.maxConnections) {
            // Full: the place of the oldest connection past its grace without a head, if any,
            // goes to the newcomer; while all of those are within their grace, the newcomers
            // wait in the backlog (the listener is watched again when the first grace ends).
            var giveWay: Connection?
            if live >= limits.maxConnections {
                giveWay = oldestPastGrace(.now)
                if giveWay == nil, live >= limits.maxConnections,
                   connections.contains(where: { $0.fd >= 0 && !$0.answered }) { return }
            }
            let fd: Int32
            do {
                guard let accepted = try System.StreamSocket.accept(listener, "metrics listener") else { return }
                fd = accepted
            } catch {
                // Out of descriptors: the client stays in the backlog; look again in a moment (or
                // when one of ours closes, at the latest by its deadline).
                if error.errno == EMFILE || error.errno == ENFILE { acceptPausedUntil = .now + .milliseconds(100) }
                return
            }
            let connection = Connection(fd: fd, owner: self, accepted: .now, limits: limits)
            if let giveWay {
                counts.withLock { $0.timedOut += 1 }
                finish(giveWay)
            } else if live >= limits.maxConnections {
                // Every place is being answered: the newcomer is told so (its head unread, so a
                // 503 never follows part of an answer).
                counts.withLock { $0.rejected += 1 }
                let answer = Self.response(status: "503 Service Unavailable", body: Array("too many connections\n".utf8))
                _ = answer.withUnsafeBytes { try? System.StreamSocket.write(fd, $0, "metrics client") }
                System.StreamSocket.close(fd)
                continue
            }
            connections.append(connection)
            guard let loop, (try? loop.add(fd, events: System.EventLoop.readable, watcher: connection)) != nil else {
                finish(connection)
                continue
            }
            // Its deadlines, as loop timers: the head's, then the whole exchange's.
            for deadline in [connection.headDeadline, connection.deadline] {
                loop.after(deadline - .now) { [weak self, weak connection] in
                    guard let self, let connection else { return }
                    self.expire(connection)
                }
            }
            // Its head may be here already: then it is answered now, usually whole at once.
            serve(connection)
            guard connection.fd >= 0 else { continue }
            // Nothing at all, after waiting out the kernel's deferral: its grace is spent (else a
            // wave of idle ones handed over together would hold the table for a grace each).
            if connection.request.isEmpty && !connection.answered && System.StreamSocket.retransmittedHandshake(fd) {
                connection.graceEnd = connection.accepted
            }
        }
    }

    /// A connection at one of its deadlines: closed if it is still at it (a slow or silent client).
    private func expire(_ connection: Connection) {
        guard !stopped, connection.fd >= 0, connection.currentDeadline <= .now else { return }
        counts.withLock { $0.timedOut += 1 }
        finish(connection)
        updateListener()
    }

    /// The oldest connection past its grace still without a whole head, read once more first
    /// (a head that came since the last wake-up is answered, not closed): nil when there is none,
    /// or when that reading freed a place.
    private func oldestPastGrace(_ now: ContinuousClock.Instant) -> Connection? {
        for connection in connections where connection.fd >= 0 && !connection.answered && connection.graceEnd <= now {
            serve(connection)
            if connection.fd < 0 { return nil }  // answered whole, or gone: a place is free
            if !connection.answered { return connection }
        }
        return nil
    }

    /// While the table is full and every connection without a head is within its grace: when
    /// the first of those graces ends (the listener is not watched till then, or till a place
    /// frees up).
    /// Nil while a newcomer can be accepted — into a free place, into the place of one past its
    /// grace, or (every place being answered) to be answered `503`.
    private func graceToWaitFor(_ now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard live >= limits.maxConnections,
              let soonest = connections.lazy.filter({ $0.fd >= 0 && !$0.answered }).map(\.graceEnd).min(),
              soonest > now else { return nil }
        return soonest
    }

    private var live: Int { connections.count }

    /// Reads the head (answering it once whole) or writes the answer, as far as the socket takes.
    fileprivate func serve(_ connection: Connection) {
        guard connection.fd >= 0 else { return }
        if connection.answered {
            writeAnswer(connection)
            return
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let room = min(buffer.count, limits.maxRequestBytes + 1 - connection.request.count)
            let result = try? buffer.withUnsafeMutableBytes { bytes in
                try System.StreamSocket.read(connection.fd, into: UnsafeMutableRawBufferPointer(rebasing: bytes[..<room]), "metrics client")
            }
            switch result {
            case .bytes(let count)?:
                connection.request += buffer[0..<count]
            case .wouldBlock?:
                return  // the loop says when more arrives
            case .end?, nil:
                finish(connection)  // the client left before asking anything whole
                return
            }
            if let end = Self.endOfHead(connection.request) {
                answer(connection, head: connection.request[..<end])
                return
            }
            if connection.request.count > limits.maxRequestBytes {
                reject(connection, "431 Request Header Fields Too Large", "request head larger than \(limits.maxRequestBytes) bytes\n")
                return
            }
        }
    }

    private func answer(_ connection: Connection, head: ArraySlice<UInt8>) {
        let firstLine = head.prefix { $0 != UInt8(ascii: "\r") && $0 != UInt8(ascii: "\n") }
        let parts = firstLine.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].starts(with: Array("HTTP/1.".utf8)), parts[1].first == UInt8(ascii: "/") else {
            reject(connection, "400 Bad Request", "expected a request line such as GET /metrics HTTP/1.1\n")
            return
        }
        let method = String(decoding: parts[0], as: UTF8.self)
        guard method == "GET" || method == "HEAD" else {
            reject(connection, "405 Method Not Allowed", "only GET and HEAD\n", extra: "Allow: GET, HEAD\r\n")
            return
        }
        let path = parts[1].prefix { $0 != UInt8(ascii: "?") }
        guard path.elementsEqual("/metrics".utf8) else {
            reject(connection, "404 Not Found", "metrics are at /metrics\n")
            return
        }
        counts.withLock { $0.scrapes += 1 }
        let body = render()
        respond(connection, Self.response(status: "200 OK", body: body, contentType: "text/plain; version=0.0.4; charset=utf-8",
                                          includeBody: method == "GET"))
    }

    private func reject(_ connection: Connection, _ status: String, _ message: String, extra: String = "") {
        counts.withLock { $0.rejected += 1 }
        respond(connection, Self.response(status: status, body: Array(message.utf8), extraHeaders: extra))
    }

    /// Writes what the socket takes now; the rest when the loop says it is writable.
    private func respond(_ connection: Connection, _ output: [UInt8]) {
        connection.output = output
        writeAnswer(connection)
        if connection.fd >= 0 { loop?.modify(connection.fd, events: System.EventLoop.writable) }
    }

    private func writeAnswer(_ connection: Connection) {
        while connection.written < connection.output.count {
            let result = try? connection.output.withUnsafeBytes { bytes in
                try System.StreamSocket.write(connection.fd, UnsafeRawBufferPointer(rebasing: bytes[connection.written...]), "metrics client")
            }
            guard case .wrote(let count)? = result else {
                if case .wouldBlock? = result { return }  // the loop says when it takes more
                finish(connection)
                return
            }
            connection.written += count
        }
        finish(connection)
    }

    /// Closes the connection and gives up its place.
    private func finish(_ connection: Connection) {
        guard connection.fd >= 0 else { return }
        loop?.remove(connection.fd)
        System.StreamSocket.close(connection.fd)
        connection.fd = -1
        connections.removeAll { $0 === connection }
    }

    /// Where the request head ends (after CRLF CRLF, or LF LF as lenient servers accept).
    static func endOfHead(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 2 else { return nil }
        for index in 1..<bytes.count where bytes[index] == 10 {
            if bytes[index - 1] == 10 { return index + 1 }
            if index >= 3, bytes[index - 1] == 13, bytes[index - 2] == 10, bytes[index - 3] == 13 { return index + 1 }
        }
        return nil
    }

    static func response(status: String, body: [UInt8], contentType: String = "text/plain; charset=utf-8",
                         extraHeaders: String = "", includeBody: Bool = true) -> [UInt8] {
        var head = "HTTP/1.1 \(status)\r\nContent-Type: \(contentType)\r\nContent-Length: \(body.count)\r\n"
        head += extraHeaders + "Connection: close\r\n\r\n"
        return Array(head.utf8) + (includeBody ? body : [])
    }
}

public struct MetricsListenerError: Error, CustomStringConvertible {
    public var description: String

    static func system(_ error: System.CallError, _ address: ListenAddress) -> MetricsListenerError {
        MetricsListenerError(description: "cannot listen on \(address): \(error.call): \(String(cString: strerror(error.errno)))")
    }
}
