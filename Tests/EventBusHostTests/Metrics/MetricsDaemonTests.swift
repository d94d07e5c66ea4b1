import ControlProtocol
import EventBusHost
import Foundation
import Testing
import TestSupport

/// The real eventbusd's metrics: over HTTP (`metrics.listen`), through the control socket with
/// the real CLI (`eventbus metrics`, `eventbus top`), scraped by a real Prometheus, and shown in
/// a real terminal.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct MetricsDaemonTests {
    /// eventbusd with the throwing-handler fixture (its handlers run through `handle(in:)`, so
    /// they are timed), in-process unless told otherwise, and `/metrics` on a free loopback port.
    struct Host {
        let directory: TemporaryDirectory
        let daemon: DaemonProcessTests.Daemon
        let socket: String
        let port: UInt16

        /// `more`: further top-level config (sources, a bridge…).
        init(isolation: String = "none", more: String = "") async throws {
            directory = try TemporaryDirectory()
            port = UInt16(try freeLoopbackPort())
            let (yaml, socket) = controlConfig(directory, rest: """
                state_directory: \(directory.path)/state
                metrics:
                  listen: 127.0.0.1:\(port)
                modules:
                  thrower:
                    path: \(BuildProducts.fixture("FixtureThrowingHandler"))
                    isolation: \(isolation)
                \(more)
                """)
            self.socket = socket
            daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        }

        func cli(_ arguments: [String]) async throws -> CLIResult {
            try await eventbus(arguments + ["--socket", socket], in: directory)
        }

        func scrape() throws -> String { try http(port, "GET /metrics HTTP/1.1\r\nHost: eventbusd\r\n\r\n") }

        func stop() async {
            daemon.signal(SIGTERM)
            _ = await daemon.exitStatus()
        }
    }

    @Test func postsMoveTheCountersOverHTTPAndTheControlSocketAlike() async throws {
        let host = try await Host()
        try postMany(host.socket, name: "test.tick", count: 25)
        #expect(try await host.cli(["post", "test.bad", "fail=true"]).status == 0)
        let module = "{module=\"thrower\"}"
        #expect(await eventually {
            sampleValue((try? host.scrape()) ?? "", "eventbus_module_events_delivered_total\(module)") == 26
        })
        let http = try host.scrape()
        let metrics = try await host.cli(["metrics"])
        #expect(metrics.status == 0)
        for text in [http, metrics.stdout] {
            #expect(sampleValue(text, "eventbus_events_posted_total{source_kind=\"user\"}") == 26)
            #expect(sampleValue(text, "eventbus_bus_sequence_total") == 26)
            #expect(sampleValue(text, "eventbus_module_events_delivered_total\(module)") == 26)
            #expect(sampleValue(text, "eventbus_module_handler_errors_total\(module)") == 1)
            #expect(sampleValue(text, "eventbus_module_events_dropped_total\(module)") == 0)
            #expect(sampleValue(text, "eventbus_module_up\(module)") == 1)
            // One handler call in 8 timed: the 8th, 16th and 24th of 26, all within +Inf.
            #expect(sampleValue(text, "eventbus_module_handler_duration_seconds_count\(module)") == 3)
            #expect(sampleValue(text, "eventbus_module_handler_duration_seconds_bucket{module=\"thrower\",le=\"+Inf\"}") == 3)
            #expect((sampleValue(text, "eventbus_module_handler_duration_seconds_sum\(module)") ?? 0) > 0)
            #expect((sampleValue(text, "process_resident_memory_bytes") ?? 0) > 1_000_000)
            #expect((sampleValue(text, "process_open_fds") ?? 0) >= 3)
            #expect((sampleValue(text, "process_threads") ?? 0) >= 2)
            // No event name in any label.
            #expect(!text.contains("test.tick") && !text.contains("test.bad"))
        }
        #expect(sampleValue(http, "eventbus_metrics_http_requests_total{outcome=\"scrape\"}").map { $0 >= 1 } == true)
        await host.stop()
    }

    /// A worker's timed handler calls travel to the host with its progress reports, into the same
    /// histogram an in-process module's go to.
    @Test func aWorkerModulesHandlerDurationsReachTheHostsHistogram() async throws {
        let host = try await Host(isolation: "process")
        try postMany(host.socket, name: "test.tick", count: 26)
        let module = "{module=\"thrower\"}"
        // One handler call in 8 timed, in the worker: the 8th, 16th and 24th of 26.
        #expect(await eventually {
            sampleValue((try? host.scrape()) ?? "", "eventbus_module_handler_duration_seconds_count\(module)") == 3
        })
        let text = try host.scrape()
        #expect(sampleValue(text, "eventbus_module_events_delivered_total\(module)") == 26)
        #expect(sampleValue(text, "eventbus_module_handler_duration_seconds_bucket{module=\"thrower\",le=\"+Inf\"}") == 3)
        #expect((sampleValue(text, "eventbus_module_handler_duration_seconds_sum\(module)") ?? 0) > 0)
        let top = try await host.cli(["top", "--once"])
        #expect(top.status == 0)
        #expect(top.stdout.contains("thrower"))
        await host.stop()
    }

    @Test func aBadListenAddressStopsTheStartWithFileLineAndKey() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, _) = controlConfig(directory, rest: """
            metrics:
              listen: localhost:9464
            """)
        let path = try directory.write("eventbus.yaml", yaml)
        let daemon = try DaemonProcessTests.Daemon(arguments: ["--config", path], in: directory)
        #expect(await daemon.exitStatus() == 1)
        #expect(daemon.output.contains("\(path):5: metrics.listen: \"localhost\" is not an IPv4 address literal (names are not resolved)"))
    }

    @Test func aListenAddressInUseStopsTheStart() async throws {
        let busy = try MetricsListenerTests().listener()
        defer { busy.stop() }
        let directory = try TemporaryDirectory()
        let (yaml, _) = controlConfig(directory, rest: """
            metrics:
              listen: \(busy.address)
            """)
        let path = try directory.write("eventbus.yaml", yaml)
        let daemon = try DaemonProcessTests.Daemon(arguments: ["--config", path], in: directory)
        #expect(await daemon.exitStatus() == 1)
        #expect(daemon.output.contains("metrics.listen: cannot listen on \(busy.address): bind: Address already in use"))
    }

    @Test func aReloadMovesTheListenerAndOneThatCannotBindKeepsIt() async throws {
        let host = try await Host()
        let moved = UInt16(try freeLoopbackPort())
        let config = try String(contentsOfFile: host.directory.at("eventbus.yaml"), encoding: .utf8)
        _ = try host.directory.write("eventbus.yaml", config.replacingOccurrences(of: ":\(host.port)", with: ":\(moved)"))
        host.daemon.signal(SIGHUP)
        #expect(await eventually { (try? http(moved, "GET /metrics HTTP/1.1\r\n\r\n"))?.hasPrefix("HTTP/1.1 200 OK") == true })
        #expect(await eventually { (try? LoopbackConnection(port: host.port)) == nil })  // the old port is closed
        // A port someone else holds: logged, and the listener stays where it was.
        let busy = try MetricsListenerTests().listener()
        defer { busy.stop() }
        _ = try host.directory.write("eventbus.yaml", config.replacingOccurrences(of: ":\(host.port)", with: ":\(busy.address.port)"))
        host.daemon.signal(SIGHUP)
        #expect(await host.daemon.waitFor("reload: cannot listen on \(busy.address): bind: Address already in use; the metrics listener stays as it was"))
        #expect(try http(moved, "GET /metrics HTTP/1.1\r\n\r\n").hasPrefix("HTTP/1.1 200 OK"))
        await host.stop()
    }

    @Test func topOnceShowsModulesAndClients() async throws {
        let host = try await Host()
        let tail = try CLIProcess(["tail", "test.>", "--socket", host.socket], in: host.directory)
        #expect(await waitForTailing(host.socket, count: 1))
        try postMany(host.socket, name: "test.tick", count: 10)
        // Delivered to both before the frame is taken (the frame itself is not waited on).
        #expect(await eventually {
            let stats = try? ask(host.socket, ["op": "stats"])
            let modules = try? ask(host.socket, ["op": "modules"])
            return stats?["tailing"]?.arrayValue?.first?["delivered"]?.intValue == 10
                && modules?["modules"]?.arrayValue?.first?["delivered"]?.intValue == 10
        })
        let top = try await host.cli(["top", "--once", "--interval", "0.2"])
        #expect(top.status == 0)
        let lines = top.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true) }
        // MODULE STATE EVENTS/S DELIVERED QUEUED DROPPED ERRORS P99
        let module = try #require(lines.first { $0.first == "thrower" }, "\(top.stdout)")
        #expect(module[1] == "active" && module[3] == "10" && module[4] == "0" && module[5] == "0" && module[6] == "0")
        #expect(module[7] != "-")  // handlers ran, so a p99 (over all time in the first frame's window)
        let client = try #require(lines.first { $0.first?.hasPrefix("#") == true }, "\(top.stdout)")
        #expect(client[4] == "10" && client[6] == "0")  // delivered, dropped
        #expect(top.stdout.contains("events posted 10"))
        tail.process.terminate()
        await host.stop()
    }
}
