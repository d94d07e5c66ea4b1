import EventBusMetrics
import Dispatch
import Foundation
import Testing
import TestSupport

/// The `/metrics` listener faces the network: what it answers, and what a malformed, oversized,
/// silent or surplus client gets — while scrapes go on.
@Suite struct MetricsListenerTests {
    func listener(_ limits: MetricsListener.Limits = MetricsListener.Limits(),
                  render: @escaping @Sendable () -> [UInt8] = { Array("test_metric_total 42\n".utf8) }) throws -> MetricsListener {
        let address = try ListenAddress(parsing: "127.0.0.1:\(try freeLoopbackPort())")
        let listener = try MetricsListener(address: address, limits: limits, render: render)
        try listener.start()
        return listener
    }

    /// An IPv6 literal is bound as one (`[::1]:PORT`), and a scrape there is answered.
    @Test func aListenerOnIPv6LoopbackAnswers() async throws {
        let listener = try MetricsListener(address: try ListenAddress(parsing: "[::1]:\(try freeLoopbackPort())")) {
            Array("test_metric_total 42\n".utf8)
        }
        try listener.start()
        defer { listener.stop() }
        let scrape = try await run("/usr/bin/curl", ["-sS", "--max-time", "60", "http://[::1]:\(listener.address.port)/metrics"])
        #expect(scrape.status == 0 && scrape.output == "test_metric_total 42\n", "\(scrape.output)")
    }

    @Test func aScrapeGetsTheTextAndBadRequestsGetTheirStatus() throws {
        let listener = try listener()
        defer { listener.stop() }
        let port = listener.address.port
        let scrape = try http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
        #expect(scrape.hasPrefix("HTTP/1.1 200 OK\r\n"))
        #expect(scrape.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"))
        #expect(scrape.contains("Content-Length: 21\r\n"))
        #expect(scrape.hasSuffix("\r\n\r\ntest_metric_total 42\n"))
        #expect(try http(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n").hasPrefix("HTTP/1.1 200 OK"))
        let head = try http(port, "HEAD /metrics HTTP/1.1\r\n\r\n")
        #expect(head.hasPrefix("HTTP/1.1 200 OK") && head.hasSuffix("\r\n\r\n"))
        #expect(try http(port, "POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc").hasPrefix("HTTP/1.1 405 Method Not Allowed"))
        #expect(try http(port, "GET /other HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 404 Not Found"))
        #expect(try http(port, "GARBAGE\r\n\r\n").hasPrefix("HTTP/1.1 400 Bad Request"))
        #expect(try http(port, "GET metrics HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 400 Bad Request"))
        #expect(try http(port, "\u{0}\u{1}\u{2}\n\n").hasPrefix("HTTP/1.1 400 Bad Request"))
        let huge = "GET /metrics HTTP/1.1\r\nX-Padding: " + String(repeating: "a", count: 10_000)
        #expect(try http(port, huge).hasPrefix("HTTP/1.1 431 Request Header Fields Too Large"))
        // After all that, scrapes still work and were counted apart from the refusals.
        #expect(try http(port, "GET /metrics HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 200 OK"))
        #expect(listener.statistics == MetricsListener.Statistics(scrapes: 4, rejected: 6, timedOut: 0))
    }

    /// Seeded request heads no scraper sends — random bytes, and a real scrape's head with bytes
    /// flipped, cut or repeated — each ending in a blank line: every one gets one HTTP status
    /// line, each is counted as a scrape or a refusal, and a real scrape still works after.
    @Test func everyMalformedHeadGetsAStatusAndIsCounted() throws {
        let listener = try listener()
        defer { listener.stop() }
        let port = listener.address.port
        var random = SplitMix(seed: 0x5EED_4E7)
        let template = Array("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n".utf8)
        var statuses: [String: Int] = [:]
        let requests = 400
        for index in 0..<requests {
            var head: [UInt8]
            if random.below(2) == 0 {
                head = (0..<(1 + random.below(120))).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            } else {
                head = template
                for _ in 0..<(1 + random.below(4)) {
                    let at = random.below(head.count)
                    switch random.below(3) {
                    case 0: head[at] = UInt8(truncatingIfNeeded: random.next())
                    case 1: head.remove(at: at)
                    default: head.insert(contentsOf: head[at..<min(head.count, at + 1 + random.below(8))], at: at)
                    }
                }
            }
            let connection = try LoopbackConnection(port: port)
            connection.send(bytes: head + Array("\r\n\r\n".utf8))
            let answer = connection.readToEnd()
            let status = answer.split(separator: "\r\n", maxSplits: 1).first.map(String.init) ?? ""
            guard status.hasPrefix("HTTP/1.1 "), status.count >= 12, Int(status.dropFirst(9).prefix(3)) != nil else {
                Issue.record("request \(index) got \(answer.prefix(200).debugDescription) for \(String(decoding: head, as: UTF8.self).debugDescription)")
                return
            }
            statuses[String(status.dropFirst(9).prefix(3)), default: 0] += 1
        }
        print("metrics fuzz: \(statuses.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        #expect(try http(port, "GET /metrics HTTP/1.1\r\n\r\n").hasSuffix("test_metric_total 42\n"))
        let counted = listener.statistics
        #expect(counted.scrapes + counted.rejected == UInt64(requests + 1), "\(counted)")
    }

    /// Limits whose deadlines never end within a test: only the grace and the table decide.
    func patientLimits(maxConnections: Int, headGrace: Duration) -> MetricsListener.Limits {
        var limits = MetricsListener.Limits()
        limits.maxConnections = maxConnections
        limits.headGrace = headGrace
        limits.headTimeout = .seconds(600)
        limits.timeout = .seconds(600)
        return limits
    }

    /// With the table full of connections within their grace, a scraper waits in the backlog —
    /// not refused, and no connection closed for it — and takes the first place that frees.
    @Test func aNewcomerWaitsWhileEveryConnectionIsWithinItsGrace() throws {
        let listener = try listener(patientLimits(maxConnections: 2, headGrace: .seconds(600)))
        defer { listener.stop() }
        let port = listener.address.port
        // Part of a head each (the kernel hands over a connection once it has sent something).
        let slow = try (0..<2).map { _ in try LoopbackConnection(port: port) }
        for connection in slow { connection.send("GET /metr") }
        let scraper = try LoopbackConnection(port: port)
        scraper.send("GET /metrics HTTP/1.1\r\n\r\n")
        // No answer while both places are taken (a correct listener never answers here, so a
        // slow machine cannot fail this; an evicting one is caught by the counts below).
        #expect(!scraper.isReadable(within: .milliseconds(500)))
        shutdown(slow[0].fd, Int32(SHUT_RDWR))  // the first one leaves: its place is free
        #expect(scraper.readToEnd().hasPrefix("HTTP/1.1 200 OK"))
        #expect(!slow[1].isReadable(within: .zero))  // within its grace: kept, not answered
        #expect(listener.statistics == MetricsListener.Statistics(scrapes: 1, rejected: 0, timedOut: 0))
    }

    /// Past its grace, the oldest connection without a head gives its place to a newcomer.
    @Test func theOldestConnectionPastItsGraceGivesWayToANewcomer() throws {
        let listener = try listener(patientLimits(maxConnections: 2, headGrace: .milliseconds(100)))
        defer { listener.stop() }
        let port = listener.address.port
        let slow = try (0..<2).map { _ in try LoopbackConnection(port: port) }
        for connection in slow { connection.send("GET /metr") }
        #expect(try http(port, "GET /metrics HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 200 OK"))
        #expect(slow[0].readToEnd() == "")  // closed without an answer
        #expect(!slow[1].isReadable(within: .zero))  // one place was enough
        #expect(listener.statistics == MetricsListener.Statistics(scrapes: 1, rejected: 0, timedOut: 1))
    }

    /// A connection that sends nothing is never accepted, so it takes no place: with the table
    /// of one held by a slowloris connection, no number of silent ones delays a scraper beyond
    /// that one's grace, and none of them is counted.
    @Test func silentConnectionsTakeNoPlace() throws {
        let listener = try listener(patientLimits(maxConnections: 1, headGrace: .milliseconds(100)))
        defer { listener.stop() }
        let port = listener.address.port
        let silent = try (0..<50).map { _ in try LoopbackConnection(port: port) }
        let slow = try LoopbackConnection(port: port)
        slow.send("GET /metr")
        #expect(try http(port, "GET /metrics HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 200 OK"))
        #expect(slow.readToEnd() == "")
        #expect(silent.allSatisfy { !$0.isReadable(within: .zero) })
        #expect(listener.statistics == MetricsListener.Statistics(scrapes: 1, rejected: 0, timedOut: 1))
    }

    /// A connection the kernel hands over silent, its deferral over, has had its grace: the
    /// next newcomer takes its place. (Else a wave of idle connections handed over together
    /// would hold the table for a grace each while scrapers wait behind them.)
    @Test func aConnectionHandedOverSilentGivesWayAtOnce() async throws {
        var limits = patientLimits(maxConnections: 1, headGrace: .seconds(600))
        limits.silenceBeforeAccept = .seconds(1)
        let listener = try listener(limits)
        defer { listener.stop() }
        let port = listener.address.port
        let silent = try LoopbackConnection(port: port)
        // Scrapes are answered beside it until the kernel hands it over (about a second); the
        // first one after that is answered in its place, and it is closed.
        var scrapes: UInt64 = 0
        #expect(await eventually {
            guard (try? http(port, "GET /metrics HTTP/1.1\r\n\r\n"))?.hasPrefix("HTTP/1.1 200 OK") == true else { return false }
            scrapes += 1
            return silent.isReadable(within: .milliseconds(100))
        })
        #expect(silent.readToEnd() == "")
        #expect(listener.statistics == MetricsListener.Statistics(scrapes: scrapes, rejected: 0, timedOut: 1))
    }

    /// When every place is taken by an answer being written (a client that does not read a
    /// large one), a newcomer is answered `503` at once, and the answer being written is not
    /// disturbed.
    @Test func aNewcomerIsAnswered503WhileEveryPlaceIsBeingAnswered() async throws {
        // Larger than loopback's socket buffers can take (a few MiB each way): the answer stays
        // in the listener's table until the client reads it.
        let size = 32 << 20
        let listener = try listener(patientLimits(maxConnections: 1, headGrace: .milliseconds(100))) {
            [UInt8](repeating: UInt8(ascii: "x"), count: size)
        }
        defer { listener.stop() }
        let port = listener.address.port
        let reader = try LoopbackConnection(port: port)
        reader.send("GET /metrics HTTP/1.1\r\n\r\n")
        // Answering, not answered: the scrape is counted when its answer is made.
        #expect(await eventually { listener.statistics.scrapes == 1 })
        #expect(try http(port, "GET /metrics HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 503 Service Unavailable"))
        let answer = reader.readToEnd()
        let head = answer.range(of: "\r\n\r\n").map { answer[..<$0.upperBound] } ?? ""
        #expect(head.hasPrefix("HTTP/1.1 200 OK\r\n") && head.contains("Content-Length: \(size)\r\n"))
        #expect(answer.utf8.count - head.utf8.count == size && answer.hasSuffix("x"))
        #expect(listener.statistics == MetricsListener.Statistics(scrapes: 1, rejected: 1, timedOut: 0))
    }

    /// Hundreds of idle and slowloris connections from one address, reconnecting whenever they
    /// are closed, must not keep a well-behaved scrape from its answer. (With 16 places held to
    /// the end of 5 s deadlines, 16 idle sockets got a scraper 0 answers of 40.) It fails a
    /// listener that turns scrapers away or closes them unanswered, not a slow machine. The
    /// idle ones stay with the kernel (never accepted); the 100 slowloris ones cycle through
    /// the 64 places, one table per grace, and a scraper waits behind the rest of them.
    @Test func aScrapeIsAnsweredWhileHundredsOfIdleAndSlowConnectionsHoldThePort() async throws {
        let listener = try listener()
        defer { listener.stop() }
        let port = listener.address.port
        let attack = ConnectionFlood(port: port, idle: 300, slow: 100)
        defer { attack.stop() }
        #expect(await eventually { attack.open >= 300 })
        var answered = 0, slowest = 0.0
        let scrapes = 20
        for _ in 0..<scrapes {
            // One try each: a scraper's connection is accepted with its head, so nothing closes it
            // unanswered. Timed from its connect, not from when a Dispatch thread took it up.
            let (answer, elapsed) = try await blocking {
                let start = ContinuousClock.now
                let answer = try http(port, "GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
                return (answer, ContinuousClock.now - start)
            }
            slowest = max(slowest, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
            if answer.hasPrefix("HTTP/1.1 200 OK") { answered += 1 }
            try await Task.sleep(for: .milliseconds(250))
        }
        print("\(answered) of \(scrapes) scrapes answered beside \(attack.open) idle and slowloris connections (\(attack.reconnects) reconnects); slowest \(String(format: "%.3f", slowest)) s")
        // Every scrape answered (a listener whose connection slots idle and slowloris clients can
        // fill turns most scrapes away with 503); how fast is
        // the benchmark's business, not a test's: a loaded machine took 20 s for one.
        #expect(answered == scrapes)
    }

    @Test func aClientThatSendsNothingIsClosedAtItsDeadline() async throws {
        var limits = MetricsListener.Limits()
        limits.timeout = .milliseconds(200)
        let listener = try listener(limits)
        defer { listener.stop() }
        let silent = try LoopbackConnection(port: listener.address.port)
        silent.send("GET /metr")  // half a request line, then nothing
        #expect(silent.readToEnd() == "")  // closed by the listener, no answer
        #expect(await eventually { listener.statistics.timedOut == 1 })
        #expect(try http(listener.address.port, "GET /metrics HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 200 OK"))
    }

    @Test func anAddressInUseIsAnErrorThatNamesIt() throws {
        let first = try listener()
        defer { first.stop() }
        #expect {
            _ = try MetricsListener(address: first.address) { [] }
        } throws: { error in
            "\(error)" == "cannot listen on \(first.address): bind: Address already in use"
        }
    }

    @Test func listenAddressesAreLiteralsWithAPort() throws {
        #expect(try ListenAddress(parsing: "127.0.0.1:9464").description == "127.0.0.1:9464")
        #expect(try ListenAddress(parsing: "[::1]:9464") == ListenAddress(parsing: "[::1]:9464"))
        #expect(try ListenAddress(parsing: "[::1]:9464").family == .ipv6)
        for (text, message) in [
            ("localhost:9464", "\"localhost\" is not an IPv4 address literal (names are not resolved)"),
            ("127.0.0.1", "expected HOST:PORT such as 127.0.0.1:9464 (an IPv6 address in brackets), found \"127.0.0.1\""),
            ("127.0.0.1:0", "the port must be a number from 1 to 65535, found \"0\""),
            ("127.0.0.1:70000", "the port must be a number from 1 to 65535, found \"70000\""),
            ("::1:9464", "expected HOST:PORT such as 127.0.0.1:9464 (an IPv6 address in brackets), found \"::1:9464\""),
            ("[::1]", "expected [IPv6]:PORT such as [::1]:9464, found \"[::1]\""),
        ] {
            #expect { try ListenAddress(parsing: text) } throws: { "\($0)" == message }
        }
    }
}

/// Idle and slowloris connections (a partial request head, a byte now and then) to a port,
/// each reconnected as soon as the server closes it, on a thread of their own.
final class ConnectionFlood: @unchecked Sendable {
    private let lock = NSLock()
    private var stopped = false
    private var openCount = 0
    private var reconnectCount = 0
    private let done = DispatchSemaphore(value: 0)

    var open: Int { lock.withLock { openCount } }
    var reconnects: Int { lock.withLock { reconnectCount } }

    init(port: UInt16, idle: Int, slow: Int) {
        Thread.detachNewThread { [self] in
            var sockets: [(connection: LoopbackConnection, slow: Bool)] = []
            func connect(slow: Bool) -> LoopbackConnection? {
                guard let connection = try? LoopbackConnection(port: port) else { return nil }
                if slow { connection.send("GET /metrics HTTP/1.1\r\n") }
                return connection
            }
            for index in 0..<(idle + slow) {
                if let connection = connect(slow: index >= idle) { sockets.append((connection, index >= idle)) }
            }
            lock.withLock { openCount = sockets.count }
            var tick = 0
            while !lock.withLock({ stopped }) {
                var fds = sockets.map { pollfd(fd: $0.connection.fd, events: Int16(POLLIN), revents: 0) }
                _ = poll(&fds, nfds_t(fds.count), 50)
                tick += 1
                for index in sockets.indices {
                    if fds[index].revents != 0 {
                        // Closed by the server (or answered 503): back at once.
                        if let fresh = connect(slow: sockets[index].slow) {
                            sockets[index].connection = fresh
                            lock.withLock { reconnectCount += 1 }
                        }
                    } else if sockets[index].slow, tick % 4 == 0 {
                        sockets[index].connection.send("X")  // one more byte of a header that never ends
                    }
                }
            }
            sockets.removeAll()
            done.signal()
        }
    }

    func stop() {
        lock.withLock { stopped = true }
        done.wait()
    }
}
