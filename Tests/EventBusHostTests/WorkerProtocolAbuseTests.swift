import ControlProtocol
import EventBusHost
import Foundation
import Testing

/// A module in a worker can write anything into its socket to the host — random bytes, frames of
/// every type with random payloads, a frame that promises more than it brings. Whatever it
/// writes, eventbusd keeps running: at worst that worker's session ends (a frame that never
/// completes swallows the heartbeats, so the worker is killed as hung), the worker is restarted,
/// the log says the protocol was broken, and other modules miss nothing.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct WorkerProtocolAbuseTests {
    typealias Daemon = DaemonProcessTests.Daemon

    @Test func whatAWorkerWritesToItsSocketNeverTakesTheHostDown() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let daemon = try await Daemon.running("""
            control: {socket: \(socket)}
            modules:
              hostile:
                path: \(BuildProducts.fixture("FixtureCrashing"))
                isolation: process
                worker: {restart_delay: 10ms, start_limit_burst: 1000, start_limit_interval: 20ms, heartbeat_timeout: 3s}
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
                isolation: process
                config: {id: counter}
            """, in: directory)

        func hostile() -> JSON? {
            (try? ask(socket, ["op": "modules"]))?["modules"]?.arrayValue?.first { $0["name"]?.stringValue == "hostile" }
        }
        // Frames of every type a worker or a host sends, and some no one does, with payloads
        // from empty to larger than the host's read size; random bytes; and short frames.
        var attacks: [JSON] = []
        for type in [0, 1, 2, 3, 4, 5, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 255] {
            for (index, count) in [0, 1, 8, 16, 300].enumerated() {
                attacks.append(["mode": "frame", "type": .int(Int64(type)), "count": .int(Int64(count)), "seed": .int(Int64(type * 10 + index))])
            }
        }
        for seed in 1...20 { attacks.append(["mode": "random", "count": .int(Int64(seed * 37)), "seed": .int(Int64(seed))]) }
        for type in [21, 23, 24] { attacks.append(["mode": "short", "type": .int(Int64(type)), "count": .int(100_000), "seed": .int(7)]) }

        // Each attack goes to a worker that answered a report after the attack before it: a live
        // session the host reads in step. (Waiting for the state `active` is not enough: a session
        // whose reader has just ended on garbage shows `active` until its end is handled, and what
        // is posted meanwhile dies with it — under load, all three short frames did once.)
        let answers = SubscribedReader(socket: socket, request: ["op": "subscribe", "patterns": ["result.crashing"]])
        #expect(await waitForTailing(socket, count: 1))
        func hostileAnswers() async -> Bool {
            let deadline = ContinuousClock.now + patience
            while ContinuousClock.now < deadline {
                let before = answers.events.count
                _ = try? ask(socket, ["op": "post", "name": "test.report"])
                // A report posted to a session that is ending is lost with it: ask again.
                if await eventually(timeout: .seconds(2), { answers.events.count > before }) { return true }
            }
            return false
        }

        var pings = 0
        var restarts: Int64 = 0
        for attack in attacks {
            #expect(await hostileAnswers(), "\(attack): \(String(describing: hostile())) \(answers.ended.value ?? "")")
            let before = hostile()?["pid"]?.intValue
            _ = try ask(socket, ["op": "post", "name": "test.garbage", "fields": attack])
            _ = try ask(socket, ["op": "post", "name": "test.ping"])
            pings += 1
            // Either the worker carries on, or the host ended its session and starts another.
            try await Task.sleep(for: .milliseconds(20))
            if let now = hostile(), now["pid"]?.intValue != before || now["state"]?.stringValue != "active" { restarts += 1 }
            #expect(daemon.process.isRunning, "eventbusd died on \(attack): \(daemon.output.suffix(3000))")
            guard daemon.process.isRunning else { return }
        }
        #expect(restarts > 0, "at least the malformed frames ended the hostile worker's session")
        #expect(daemon.output.contains("module worker crashed: it broke the worker protocol (malformed frame: unknown frame type 255), so the host ended its session"),
                "\(daemon.output.suffix(3000))")
        #expect(await daemon.waitFor("module worker crashed: no heartbeat within 3.0 seconds"),
                "a short frame swallows the heartbeats: \(daemon.output.suffix(3000))")

        // The other module saw every ping.
        let counted = try CLIProcess(["tail", "result.counter.>", "--json", "--count", "1", "--socket", socket], in: directory)
        #expect(await waitForTailing(socket, count: 2))
        _ = try ask(socket, ["op": "post", "name": "test.report"])
        let report = await counted.finish().jsonLines.first { $0["type"]?.stringValue == "event" }
        #expect(report?["fields"]?["count"]?.intValue == Int64(attacks.count + pings), "\(String(describing: report))")
        // The hostile one, restarted once more after its last short frame, answers again.
        #expect(await hostileAnswers(), "\(daemon.output.suffix(3000))")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output.suffix(3000))")
    }
}
