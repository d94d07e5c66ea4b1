import EventBusMetrics
import Foundation
import Testing
import TestSupport

/// The `/metrics` listener faces the network: what it answers, and what a malformed, oversized,
/// silent or surplus client gets — while scrapes go on.
@Suite struct MetricsListenerTests {
    func listener(_ limits: MetricsListener.Limits = MetricsListener.Limits()) throws -> MetricsListener {
        let address = try ListenAddress(parsing: "127.0.0.1:\(try freeLoopbackPort())")
        let listener = try MetricsListener(address: address, limits: limits) { Array("test_metric_total 42\n".utf8) }
        listener.start()
        return listener
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

    @Test func silentClientsHoldNobodyAndOneOverTheLimitIsRefused() throws {
        var limits = MetricsListener.Limits()
        limits.maxConnections = 3
        let listener = try listener(limits)
        defer { listener.stop() }
        let port = listener.address.port
        // Two connections that never send a byte (slowloris): a scrape beside them is answered.
        let silent = try (0..<2).map { _ in try LoopbackConnection(port: port) }
        #expect(try http(port, "GET /metrics HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 200 OK"))
        // A third silent one fills the limit; the next is told so and closed.
        let third = try LoopbackConnection(port: port)
        #expect(try http(port, "GET /metrics HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 503 Service Unavailable"))
        withExtendedLifetime((silent, third)) {}
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
