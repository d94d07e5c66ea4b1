import ControlProtocol
import Foundation
import Testing
import TestSupport

/// A real Prometheus scraping a real eventbusd, and `eventbus top` in a real terminal (tmux).
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct PrometheusAndTerminalTests {
    /// Runs a program to its end with its output in a file, through `posix_spawn` and
    /// `waitpid`: Foundation's `Process.waitUntilExit` never returned for a tmux client that
    /// started the tmux server, and a pipe would stay open in the server for as long as it lives.
    func runTool(_ program: String, _ arguments: [String], in directory: TemporaryDirectory) throws -> (status: Int32, output: String) {
        let path = try directory.write("tool-\(UUID().uuidString).out", "")
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, path, O_WRONLY | O_APPEND, 0)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Signals at their defaults and none blocked, as in a login shell: the test runner's
        // ignored SIGINT would otherwise reach `eventbus top` through tmux and Ctrl-C do nothing.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var all = sigset_t()
        var none = sigset_t()
        sigfillset(&all)
        sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        let argv = ([program] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, program, &actions, &attributes, argv, environ)
        guard spawned == 0 else { throw POSIXError(POSIXErrorCode(rawValue: spawned) ?? .ENOENT) }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        let exitStatus = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return (exitStatus, (try? String(contentsOfFile: path, encoding: .utf8)) ?? "")
    }

    @Test func aRealPrometheusScrapesEventbusdAndSeesTheCounterMove() async throws {
        guard PrometheusServer.isInstalled else {
            print("skipped: \(PrometheusServer.path) is not installed (Debian's prometheus package, installed by .ci/setup, could not be installed here)")
            return
        }
        let host = try await MetricsDaemonTests.Host()
        let prometheus = try PrometheusServer(config: """
            global:
              scrape_interval: 1s
              evaluation_interval: 1s
            scrape_configs:
              - job_name: eventbusd
                static_configs:
                  - targets: ["127.0.0.1:\(host.port)"]
            """, in: host.directory)
        let query = prometheus.value
        let posted = "eventbus_events_posted_total{job=\"eventbusd\",source_kind=\"user\"}"
        // Scraped once before the posts: the counter is there, at 0.
        let scrapedBefore = await eventually { query(posted) == "0" }
        #expect(scrapedBefore, "Prometheus never scraped eventbusd:\n\(prometheus.log)")
        try postMany(host.socket, name: "test.tick", count: 12)
        #expect(await eventually { query(posted) == "12" })
        #expect(query("up{job=\"eventbusd\"}") == "1")
        #expect(await eventually { query("eventbus_module_events_delivered_total{module=\"thrower\"}") == "12" })
        await host.stop()
    }

    @Test func topRunsLiveInARealTerminal() async throws {
        let tmux = "/usr/bin/tmux"
        guard FileManager.default.isExecutableFile(atPath: tmux) else {
            print("skipped: \(tmux) is not installed (.ci/setup installs it)")
            return
        }
        let host = try await MetricsDaemonTests.Host()
        let server = "eventbus-top-\(uniqueSuffix())"
        let cli = BuildProducts.directory + "/eventbus"
        #expect(try runTool(tmux, ["-L", server, "-f", "/dev/null", "new-session", "-d", "-x", "150", "-y", "30",
                                   "-s", "top", "\(cli) top --socket \(host.socket)"], in: host.directory).status == 0)
        defer { _ = try? runTool(tmux, ["-L", server, "kill-server"], in: host.directory) }
        func screen() -> String {
            (try? runTool(tmux, ["-L", server, "capture-pane", "-p", "-t", "top"], in: host.directory).output) ?? ""
        }
        func moduleRow() -> [Substring]? {
            screen().split(separator: "\n").map { $0.split(separator: " ") }.first { $0.first == "thrower" }
        }
        #expect(await eventually { moduleRow()?[3] == "0" }, "\(screen())")
        try postMany(host.socket, name: "test.tick", count: 7)
        // The next frames show the module's deliveries (the view refreshes by itself).
        #expect(await eventually { moduleRow()?[3] == "7" }, "\(screen())")
        #expect(screen().contains("events posted 7"))
        // Ctrl-C ends it, and with it the tmux session.
        _ = try runTool(tmux, ["-L", server, "send-keys", "-t", "top", "C-c"], in: host.directory)
        #expect(await eventually { (try? runTool(tmux, ["-L", server, "has-session", "-t", "top"], in: host.directory).status) != 0 })
        await host.stop()
    }
}
