import ControlProtocol
import Foundation
import Testing
import TestSupport

/// Real eventbusd processes bridged through a real nats-server that the test starts on a free
/// loopback port (JetStream storage in its temporary folder) and stops by pid.
@Suite(.serialized, .enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.realDaemon, .nats), .skippable(.realDaemon, .nats))
struct BridgeDaemonTests {
    @Test func eventsCrossBothWaysWithTheirTypesAndOrigin() async throws {
        let directory = try TemporaryDirectory("bridge-daemons")
        let server = try NATSServer(storage: directory.path)
        let bridge = "export: [\">\"]\nimport: [\">\"]"
        let a = try BridgedHost("alpha", server: server, in: directory, bridge: bridge)
        let b = try BridgedHost("beta", server: server, in: directory, bridge: bridge)
        try await a.start()
        try await b.start()
        let tailA = try TailCollector(a.socket, ["deploy.>"])
        let tailB = try TailCollector(b.socket, ["deploy.>"])
        try await Task.sleep(for: .milliseconds(200))  // both subscriptions are at the server
        let fields: JSON = ["env": "prod", "replicas": .int(3), "ratio": .double(0.25), "canary": .bool(false)]
        _ = try ask(a.socket, ["op": "post", "name": "deploy.done", "fields": fields])
        _ = try ask(b.socket, ["op": "post", "name": "deploy.rollback", "fields": ["reason": "smoke test", "step": .int(2)]])
        #expect(await eventually { tailA.events.count == 2 && tailB.events.count == 2 },
                "alpha: \(a.daemon?.output ?? "")\nbeta: \(b.daemon?.output ?? "")\nserver: \(server.output.suffix(3000))\nA: \(tailA.events)\nB: \(tailB.events)")
        let onB = try #require(tailB.named("deploy.done").first)
        #expect(onB["source"] == "user")
        #expect(onB["fields"]?["env"] == "prod")
        #expect(onB["fields"]?["replicas"] == .int(3))
        #expect(onB["fields"]?["ratio"] == .double(0.25))
        #expect(onB["fields"]?["canary"] == .bool(false))
        #expect(onB["fields"]?["@origin.host"] == "alpha")
        #expect(onB["fields"]?["@origin.seq"] == .int(1))
        let onA = try #require(tailA.named("deploy.rollback").first)
        #expect(onA["fields"]?["@origin.host"] == "beta")
        #expect(onA["fields"]?["step"] == .int(2))
        #expect(tailA.named("deploy.done").first?["fields"]?["@origin.host"] == nil)  // its own, local
        // eventbus tail --host filters by origin; `local` is the host's own events.
        let fromBeta = try await eventbus(["tail", "--socket", a.socket, "--host", "beta", "--last", "10", "--count", "1", "--json"], in: directory)
        #expect(fromBeta.jsonLines.map { $0["name"] } == ["deploy.rollback"])
        let local = try await eventbus(["tail", "--socket", a.socket, "--host", "local", "--last", "10", "--count", "1", "--json"], in: directory)
        #expect(local.jsonLines.map { $0["name"] } == ["deploy.done"])
        let human = try await eventbus(["tail", "--socket", a.socket, "--host", "beta", "--last", "10", "--count", "1"], in: directory)
        let betaSequence = onA["fields"]?["@origin.seq"]?.intValue ?? -1  // 1, or 2 if alpha's event reached beta first
        #expect(human.stdout.contains("deploy.rollback (user) from beta#\(betaSequence) reason=\"smoke test\" step=2"))
        // The CLI shows the bridge.
        let status = try await eventbus(["status", "--socket", b.socket], in: directory)
        #expect(status.stdout.contains("bridge:        core NATS as beta, connected"))
        #expect(b.count("imported") == 1 && b.count("exported") == 1 && b.count("echoes_dropped") == 1)
        await a.kill(SIGTERM)
        await b.kill(SIGTERM)
        server.stop()
    }

    /// Three hosts that all export and import everything: each sees every event exactly once.
    @Test func threeHostsThatShareEverythingSeeEachEventOnce() async throws {
        let directory = try TemporaryDirectory("bridge-daemons")
        let server = try NATSServer(storage: directory.path)
        let names = ["alpha", "beta", "gamma"]
        let hosts = try names.map { try BridgedHost($0, server: server, in: directory, bridge: "export: [\">\"]\nimport: [\">\"]") }
        for host in hosts { try await host.start() }
        let tails = try hosts.map { try TailCollector($0.socket, ["loop.>"]) }
        try await Task.sleep(for: .milliseconds(200))
        let perHost = 200
        try await withThrowingTaskGroup(of: Void.self) { group in
            for host in hosts { group.addTask { try post(host.socket, "loop.tick", 1...perHost) } }
            try await group.waitForAll()
        }
        let everything = Set(names.flatMap { name in (1...perHost).map { "\(name):\($0)" } })
        for (index, tail) in tails.enumerated() {
            #expect(await eventually { tail.named("loop.").count >= names.count * perHost })
            // Local events carry no origin: name them by their host for the comparison.
            let keys = tail.keys("loop.").map { $0.hasPrefix("local:") ? names[index] + $0.dropFirst(5) : $0 }
            #expect(keys.count == Set(keys).count, "\(names[index]) saw duplicates")
            #expect(Set(keys) == everything)
        }
        // Nothing more arrives: no event goes round again.
        try await Task.sleep(for: .milliseconds(500))
        for tail in tails { #expect(tail.named("loop.").count == names.count * perHost) }
        for host in hosts {
            #expect(host.count("exported") == Int64(perHost))
            #expect(host.count("imported") == Int64(2 * perHost))
        }
        for host in hosts { await host.kill(SIGTERM) }
        server.stop()
    }

    /// Core NATS is at-most-once: a server frozen for 3 s makes the hosts' connections go stale;
    /// they reconnect with backoff and each announces the window as a `bridge.gap`.
    @Test func aFrozenServerInCoreModeIsAnnouncedAsAGap() async throws {
        let directory = try TemporaryDirectory("bridge-daemons")
        let server = try NATSServer(storage: directory.path)
        let settings = "export: [\"load.>\"]\nimport: [\"load.>\"]\nping_interval: 500ms\nmax_pings_out: 2\nreconnect_wait: 100ms\nmax_reconnect_wait: 1s"
        let a = try BridgedHost("alpha", server: server, in: directory, bridge: settings)
        let b = try BridgedHost("beta", server: server, in: directory, bridge: settings)
        try await a.start()
        try await b.start()
        let tailB = try TailCollector(b.socket, ["load.>", "bridge.gap"])
        try await Task.sleep(for: .milliseconds(200))
        try post(a.socket, "load.before", 1...10)
        #expect(await eventually { tailB.named("load.before").count == 10 })
        server.suspend()
        let stopped = Date()
        try post(a.socket, "load.during", 1...50)
        try await Task.sleep(for: .seconds(3))
        server.resume()
        #expect(await eventually { b.count("reconnects") >= 1 && a.count("reconnects") >= 1 })
        try post(a.socket, "load.after", 1...10)
        #expect(await eventually { tailB.named("load.after").count == 10 })
        #expect(await eventually { !tailB.named("bridge.gap").isEmpty })
        let gap = try #require(tailB.named("bridge.gap").first?["fields"])
        #expect(gap["kind"] == "disconnected")
        #expect(gap["subjects"] == "eventbus.*.load.>")
        #expect(gap["bridge_host"] == "beta")
        #expect(gap["dropped"] == nil)  // core NATS cannot say how many
        let from = try #require(ISO8601DateFormatter.withFractions.date(from: gap["from"]?.stringValue ?? ""))
        let until = try #require(ISO8601DateFormatter.withFractions.date(from: gap["until"]?.stringValue ?? ""))
        #expect(from >= stopped.addingTimeInterval(-1) && until > from)
        #expect(b.count("gaps") >= 1 && b.count("disconnects") >= 1)
        // Whatever arrived of the frozen window arrived once.
        let during = tailB.keys("load.during")
        #expect(during.count == Set(during).count)
        await a.kill(SIGTERM)
        await b.kill(SIGTERM)
        server.stop()
    }
}

extension ISO8601DateFormatter {
    static var withFractions: ISO8601DateFormatter {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return formatter
    }
}
