import EventBusHost
import EventBusMetrics
import Foundation
import Testing
import TestSupport

/// The `metrics` section: off by default, an address literal with a port, errors with file,
/// line and key.
@Suite struct MetricsConfigTests {
    func load(_ yaml: String) throws(ConfigError) -> HostConfig {
        let directory = try! TemporaryDirectory()
        return try HostConfig.load(from: try! directory.write("eventbus.yaml", yaml))
    }

    @Test func offUnlessListenIsGiven() throws {
        #expect(try load("shutdown_timeout: 5s\n").metrics.listen == nil)
        #expect(try load("metrics:\n  listen: \"[::1]:9464\"\n").metrics.listen == ListenAddress(parsing: "[::1]:9464"))
    }

    @Test func mistakesNameLineAndKey() {
        for (yaml, line, key, message) in [
            ("metrics:\n  listen: 127.0.0.1\n", 2, "metrics.listen",
             "expected HOST:PORT such as 127.0.0.1:9464 (an IPv6 address in brackets), found \"127.0.0.1\""),
            ("shutdown_timeout: 5s\nmetrics:\n  listen: 9464\n", 3, "metrics.listen", "expected a string, found 9464"),
            ("metrics:\n  port: 9464\n", 2, "metrics.port", nil),
        ] as [(String, Int, String, String?)] {
            do {
                _ = try load(yaml)
                Issue.record("loaded without error: \(yaml)")
            } catch {
                #expect(error.line == line)
                #expect(error.key == key)
                if let message { #expect(error.message == message) }
            }
        }
    }
}
