import CEpoll
import Foundation
import Synchronization
import SystemCalls

/// Serves `GET /metrics` over plain HTTP/1.1 for Prometheus, on one thread of its own.
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
/// One thread, `poll(2)` on the listening socket, a wake-up and the connections (all
/// non-blocking). Rendering runs on it: a scrape waits for the one before.
/// ``init(address:limits:render:)`` binds (so an address in use is an error at start) and
/// ``stop()`` joins the thread; both from the host's control queue.
public final class MetricsListener: @unchecked Sendable {
    // @unchecked: `connections` and the descriptors are touched only on the listener's thread
    // after `start`; `thread` only by start/stop on one caller's queue.

    public struct Limits: Sendable {
        public var maxConnections = 64
        public var maxRequestBytes = 8 * 1024
        /// How long a connection that has sent nothing stays with the kernel before it is
        /// accepted (`TCP_DEFER_ACCEPT`, whole seconds, which Linux rounds up to its SYN-ACK
        /// retransmissions: 30 s is about 31 s). An HTTP client speaks first, so a scraper is
        /// accepted the moment its head arrives and is never queued behind idle connections;
        /// an idle one costs a small kernel entry — no descriptor, place or wake-up of this
        /// thread — until then, or for good if the kernel drops it. A flood beyond the backlog
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
    /// What ``stop()`` signals to end the thread's poll.
    private let wake: System.WakeUp
    private var connections: [Connection] = []
    /// Set when accepting ran out of descriptors: the listener is not polled until then.
    private var acceptPausedUntil: ContinuousClock.Instant?
    private let stopped = Mutex(false)
    private let done = DispatchSemaphore(value: 0)
    private var started = false
    private let counts = Mutex(Statistics())

    private final class Connection {
        /// -1 once closed.
        var fd: Int32
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

        init(fd: Int32, accepted: ContinuousClock.Instant, limits: Limits) {
            self.fd = fd
            self.accepted = accepted
            self.deadline = accepted + limits.timeout
            self.headDeadline = accepted + min(limits.headTimeout, limits.timeout)
            self.graceEnd = min(accepted + limits.headGrace, headDeadline)
        }
    }

    /// Binds `address` and listens; ``start()`` begins answering. `render` makes the text of
    /// one scrape, on the listener's thread.
    public init(address: ListenAddress, limits: Limits = Limits(),
                render: @escaping @Sendable () -> [UInt8]) throws(MetricsListenerError) {
        self.address = address
        self.limits = limits
        self.render = render
        let domain = address.family == .ipv4 ? AF_INET : AF_INET6
        let fd = socket(domain, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .system("socket", errno, address) }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var silence = Int32(clamping: max(1, limits.silenceBeforeAccept.components.seconds))
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_DEFER_ACCEPT, &silence, socklen_t(MemoryLayout<Int32>.size))
        let bound: Int32
        switch address.family {
        case .ipv4:
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = address.port.bigEndian
            _ = address.host.withCString { inet_pton(AF_INET, $0, &sin.sin_addr) }
            bound = withUnsafePointer(to: &sin) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
        case .ipv6:
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = address.port.bigEndian
            _ = address.host.withCString { inet_pton(AF_INET6, $0, &sin6.sin6_addr) }
            bound = withUnsafePointer(to: &sin6) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in6>.size)) }
            }
        }
        // A deep backlog: a connect that finds it full is retried by the client a second later.
        guard bound == 0, listen(fd, 1024) == 0 else {
            let error = errno
            close(fd)
            throw .system("bind", error, address)
        }
        do {
            wake = try System.WakeUp()
        } catch {
            close(fd)
            throw .system("eventfd", error.errno, address)
        }
        self.listener = fd
    }

    deinit {
        close(listener)
    }

    public var statistics: Statistics { counts.withLock { $0 } }

    /// Starts the listener's thread.
    public func start() {
        precondition(!started, "a metrics listener starts once")
        started = true
        let thread = Thread { [self] in
            run()
            done.signal()
        }
        thread.name = "eventbus-metrics"
        thread.start()
    }

    /// Closes every connection and the listening socket's thread; returns once it has ended.
    public func stop() {
        guard started else { return }
        stopped.withLock { $0 = true }
        wake.signal()
        done.wait()
        started = false
    }

    // MARK: The listener's thread

    private func run() {
        var fds: [pollfd] = []
        while !stopped.withLock({ $0 }) {
            fds.removeAll(keepingCapacity: true)
            fds.append(pollfd(fd: wake.descriptor, events: Int16(POLLIN), revents: 0))
            let now = ContinuousClock.now
            if let until = acceptPausedUntil, until <= now { acceptPausedUntil = nil }
            let fullUntil = acceptPausedUntil == nil ? graceToWaitFor(now) : nil
            // A negative descriptor is skipped by poll: while nothing can be accepted, the listener
            // (readable as long as a client waits) would otherwise wake the loop at once, forever.
            let accepting = acceptPausedUntil == nil && fullUntil == nil
            fds.append(pollfd(fd: accepting ? listener : -1, events: Int16(POLLIN), revents: 0))
            for connection in connections {
                fds.append(pollfd(fd: connection.fd, events: Int16(connection.answered ? POLLOUT : POLLIN), revents: 0))
            }
            let soonest = (connections.map(\.currentDeadline) + [acceptPausedUntil, fullUntil].compactMap { $0 }).min()
            let timeout = soonest.map { max(0, Int32(clamping: ($0 - now).milliseconds + 1)) } ?? -1
            guard (try? System.poll(&fds, timeout: timeout)) != nil else { break }
            if fds[1].revents & Int16(POLLIN) != 0 { acceptWaiting() }
            // Connections as they were when polled (accepting appended new ones after them).
            for (index, pollFD) in fds.enumerated().dropFirst(2) where pollFD.revents != 0 {
                serve(connections[index - 2], events: pollFD.revents)
            }
            let after = ContinuousClock.now
            connections.removeAll { connection in
                if connection.fd < 0 { return true }
                guard connection.currentDeadline <= after else { return false }
                counts.withLock { $0.timedOut += 1 }
                close(connection.fd)
                return true
            }
        }
        for connection in connections where connection.fd >= 0 { close(connection.fd) }
        connections.removeAll()
    }

    /// Accepts what waits, at most ``Limits/maxConnections`` per round: a flood of connects
    /// must not keep the thread from reading the heads of those it has.
    private func acceptWaiting() {
        for _ in 0..<max(1, limits.maxConnections) {
            // Full: the place of the oldest connection past its grace without a head, if any,
            // goes to the newcomer; while all of those are within their grace, the newcomers
            // wait in the backlog (the loop polls the listener again when the first grace ends).
            var giveWay: Connection?
            if live >= limits.maxConnections {
                giveWay = oldestPastGrace(.now)
                if giveWay == nil, live >= limits.maxConnections,
                   connections.contains(where: { $0.fd >= 0 && !$0.answered }) { return }
            }
            let fd = Self.accept4(listener, nil, nil, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            if fd < 0 {
                // EAGAIN: none left. Out of descriptors: the client stays in the backlog; look again
                // in a moment (or when one of ours closes, at the latest by its deadline).
                if errno == EMFILE || errno == ENFILE { acceptPausedUntil = .now + .milliseconds(100) }
                return
            }
            let connection = Connection(fd: fd, accepted: .now, limits: limits)
            if let giveWay {
                counts.withLock { $0.timedOut += 1 }
                finish(giveWay)
            } else if live >= limits.maxConnections {
                // Every place is being answered: the newcomer is told so (its head unread, so a
                // 503 never follows part of an answer).
                counts.withLock { $0.rejected += 1 }
                var answer = Self.response(status: "503 Service Unavailable", body: Array("too many connections\n".utf8))
                _ = send(fd, &answer, answer.count, Int32(MSG_NOSIGNAL))
                finish(connection)
                continue
            }
            // Its head may be here already: then it is answered now, usually whole at once.
            serve(connection, events: Int16(POLLIN))
            guard connection.fd >= 0 else { continue }
            // Nothing at all, after waiting out the kernel's deferral: its grace is spent (else a
            // wave of idle ones handed over together would hold the table for a grace each).
            if connection.request.isEmpty && !connection.answered && Self.waitedOutDeferral(fd) {
                connection.graceEnd = connection.accepted
            }
            connections.append(connection)
        }
    }

    /// The oldest connection past its grace still without a whole head, read once more first
    /// (a head that came since the last poll is answered, not closed): nil when there is none,
    /// or when that reading freed a place.
    private func oldestPastGrace(_ now: ContinuousClock.Instant) -> Connection? {
        for connection in connections where connection.fd >= 0 && !connection.answered && connection.graceEnd <= now {
            serve(connection, events: Int16(POLLIN))
            if connection.fd < 0 { return nil }  // answered whole, or gone: a place is free
            if !connection.answered { return connection }
        }
        return nil
    }

    /// While the table is full and every connection without a head is within its grace: when
    /// the first of those graces ends (the listener is not polled till then, or till a place
    /// frees up).
    /// Nil while a newcomer can be accepted — into a free place, into the place of one past its
    /// grace, or (every place being answered) to be answered `503`.
    private func graceToWaitFor(_ now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard live >= limits.maxConnections,
              let soonest = connections.lazy.filter({ $0.fd >= 0 && !$0.answered }).map(\.graceEnd).min(),
              soonest > now else { return nil }
        return soonest
    }

    /// Whether the kernel sent the connection's SYN-ACK again: for one handed over without
    /// data, that it waited out `TCP_DEFER_ACCEPT` (Linux retransmits the SYN-ACK at its end
    /// and hands the connection over on the client's ACK). One that came by SYN cookie, in a
    /// SYN flood beyond the backlog, has no deferral behind it and keeps its grace: with none,
    /// such a flood would cycle the table as fast as it reconnects.
    private static func waitedOutDeferral(_ fd: Int32) -> Bool {
        var info = tcp_info()
        var length = socklen_t(MemoryLayout<tcp_info>.size)
        return getsockopt(fd, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 && info.tcpi_total_retrans > 0
    }

    /// Connections not yet closed (closed ones leave the list after the round of poll results).
    private var live: Int { connections.reduce(0) { $0 + ($1.fd >= 0 ? 1 : 0) } }

    private func serve(_ connection: Connection, events: Int16) {
        if connection.answered {
            writeAnswer(connection)
            return
        }
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let room = min(buffer.count, limits.maxRequestBytes + 1 - connection.request.count)
            let count: Int
            do throws(System.CallError) {
                count = try System.call("recv") { recv(connection.fd, &buffer, room, 0) }
            } catch {
                if error.errno == EAGAIN { break }  // poll says when more arrives
                count = 0
            }
            if count == 0 {
                finish(connection)  // the client left before asking anything whole
                return
            }
            connection.request += buffer[0..<count]
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
        let output = Self.response(status: "200 OK", body: body, contentType: "text/plain; version=0.0.4; charset=utf-8",
                                   includeBody: method == "GET")
        connection.output = output
        writeAnswer(connection)
    }

    private func reject(_ connection: Connection, _ status: String, _ message: String, extra: String = "") {
        counts.withLock { $0.rejected += 1 }
        connection.output = Self.response(status: status, body: Array(message.utf8), extraHeaders: extra)
        writeAnswer(connection)
    }

    private func writeAnswer(_ connection: Connection) {
        while connection.written < connection.output.count {
            do throws(System.CallError) {
                connection.written += try System.call("send") {
                    connection.output.withUnsafeBytes { bytes in
                        send(connection.fd, bytes.baseAddress! + connection.written, bytes.count - connection.written, Int32(MSG_NOSIGNAL))
                    }
                }
            } catch {
                if error.errno == EAGAIN { return }  // poll says when it takes more
                finish(connection)
                return
            }
        }
        finish(connection)
    }

    /// `accept4(2)`, looked up at run time: Swift's Glibc module does not declare it (a GNU
    /// extension), and `accept` + `fcntl` would let a module worker spawned in between inherit
    /// the descriptor.
    private static let accept4: @convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32 = {
        guard let symbol = dlsym(nil, "accept4") else { fatalError("glibc without accept4") }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32).self)
    }()

    /// Closes the connection; it leaves the list after this round of poll results.
    private func finish(_ connection: Connection) {
        guard connection.fd >= 0 else { return }
        close(connection.fd)
        connection.fd = -1
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

    static func system(_ call: String, _ code: Int32, _ address: ListenAddress) -> MetricsListenerError {
        MetricsListenerError(description: "cannot listen on \(address): \(call): \(String(cString: strerror(code)))")
    }
}

extension Duration {
    fileprivate var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
