import ControlProtocol
import Foundation
import Testing
import TestSupport

/// Durable mode under chaos, with real processes: two eventbusd hosts (alpha, gamma) export and
/// import a steady stream of events each, a third (beta) imports both and is SIGKILLed at random
/// instants of its import (inside fetch batches), and nats-servers are SIGKILLed mid-stream and
/// started again on their storage. What must hold:
/// - alpha and gamma, never killed, post each other's events exactly once and in their origin's
///   order, every event the origin's `post` acknowledged;
/// - beta posts every event in at least one of its lives, each life in each origin's order and
///   nothing twice within a life (what a life posted in its last instant may come again in the
///   next one, a new bus: see docs/fleet-durability.md);
/// - no `bridge.gap`, `lost` 0.
///
/// In the cluster one server also stays down until alpha takes in gamma's events posted after its
/// death (asserted, with a generous deadline: a quorum remains, so imports must resume).
/// The stall each server death causes (from the kill to alpha's next import of gamma's events,
/// and until alpha has caught up with what gamma posted after the restart) is printed, not
/// asserted: a loaded machine's numbers are not the code's.
@Suite(.serialized, .enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.realDaemon, .nats), .skippable(.realDaemon, .nats))
struct BridgeChaosTests {
    static func settings(replicas: Int = 1) -> String {
        """
        export: ["load.>"]
        import: ["load.>"]
        ping_interval: 500ms
        max_pings_out: 2
        reconnect_wait: 100ms
        max_reconnect_wait: 500ms
        durable: {stream: CHAOS, max_age: 1h, ack_wait: 2s, replicas: \(replicas), consumer_replicas: 1}
        """
    }

    /// One nats-server: 3 deaths mid-stream, 6 SIGKILLs of beta.
    @Test func serverDeathsAndReceiverKillsKeepEveryOriginsOrder() async throws {
        let directory = try TemporaryDirectory("bridge-chaos")
        let storage = directory.path + "/nats"
        try FileManager.default.createDirectory(atPath: storage, withIntermediateDirectories: true)
        let first = try NATSServer(storage: storage)
        let port = first.port
        let servers = ServerSet([first]) { _ in try NATSServer(storage: storage, port: port) }
        try await run(servers: servers, url: first.url, settings: Self.settings(), in: directory,
                      plan: [.receiver, .server, .receiver, .server, .receiver, .receiver, .server, .receiver, .receiver])
    }

    /// A three-server cluster (stream replicas 3, consumers 1): each server SIGKILLed once
    /// mid-stream and started again, 4 SIGKILLs of beta. Each host lists all three servers.
    @Test func clusterServerDeathsAndReceiverKillsKeepEveryOriginsOrder() async throws {
        let directory = try TemporaryDirectory("bridge-chaos-cluster")
        let picked = try freeLoopbackPorts(6)
        let ports = Array(picked[0..<3])
        let routes = Array(picked[3..<6])
        func configuration(_ index: Int) -> String {
            """
            server_name: n\(index + 1)
            cluster {
              name: chaos
              listen: 127.0.0.1:\(routes[index])
              routes: [\(routes.indices.filter { $0 != index }.map { "nats-route://127.0.0.1:\(routes[$0])" }.joined(separator: ", "))]
            }
            """
        }
        func start(_ index: Int) throws -> NATSServer {
            let storage = directory.path + "/n\(index + 1)"
            try FileManager.default.createDirectory(atPath: storage, withIntermediateDirectories: true)
            return try NATSServer(storage: storage, port: ports[index], configuration: configuration(index))
        }
        let servers = ServerSet(try (0..<3).map(start), restart: start)
        let url = ports.map { "nats://127.0.0.1:\($0)" }.joined(separator: ", ")
        try await run(servers: servers, url: url, settings: Self.settings(replicas: 3), in: directory,
                      plan: [.receiver, .server, .receiver, .serverStaysDown, .receiver, .server, .receiver])
    }

    enum Step {
        case receiver, server
        /// A server killed and started again only once imports resumed without it.
        case serverStaysDown
    }

    /// The servers of a test, each restartable on its port and storage.
    final class ServerSet: @unchecked Sendable {
        var servers: [NATSServer]
        let restart: (Int) throws -> NATSServer
        private var next = 0
        init(_ servers: [NATSServer], restart: @escaping (Int) throws -> NATSServer) {
            self.servers = servers
            self.restart = restart
        }
        /// The next server in turn, SIGKILLed; returns its index.
        func killNext() -> Int {
            let index = next % servers.count
            next += 1
            servers[index].sigkill()
            return index
        }
        func start(_ index: Int) throws { servers[index] = try restart(index) }
        func stopAll() { servers.forEach { $0.stop() } }
        var output: String { servers.map { String($0.output.suffix(4000)) }.joined(separator: "\n---\n") }
    }

    private func run(servers: ServerSet, url: String, settings: String, in directory: TemporaryDirectory, plan: [Step]) async throws {
        defer { servers.stopAll() }
        // What a kill takes from a tail's buffer is posted again in the next life: positions wait
        // for the tails.
        let control = BridgedHost.wholeLifeControl
        let alpha = try BridgedHost("alpha", server: servers.servers[0], url: url, in: directory, bridge: settings, control: control)
        let gamma = try BridgedHost("gamma", server: servers.servers[0], url: url, in: directory, bridge: settings, control: control)
        let beta = try BridgedHost("beta", server: servers.servers[0], url: url, in: directory, bridge: """
            import: ["load.>"]
            ping_interval: 500ms
            max_pings_out: 2
            reconnect_wait: 100ms
            max_reconnect_wait: 500ms
            durable: {stream: CHAOS, max_age: 1h, ack_wait: 2s, replicas: \(settings.contains("replicas: 3") ? 3 : 1), consumer_replicas: 1}
            """, control: control)
        for host in [beta, alpha, gamma] { try await host.start() }
        for host in [beta, alpha, gamma] {
            let ready = await settle(timeout: patience) { host.daemon?.output.contains("importing from stream CHAOS") == true }
            try #require(ready, "\(host.name) never imported: \(host.daemon?.output ?? "")\n\(servers.output)")
        }
        let alphaTail = try OriginTail(alpha.socket)
        let gammaTail = try OriginTail(gamma.socket)
        var lives = [try OriginTail(beta.socket)]

        let alphaPoster = Poster(alpha.socket, limit: 40_000)
        let gammaPoster = Poster(gamma.socket, limit: 40_000)
        var stalls: [String] = []
        // Each server death: the server, when, and the last gamma event posted before it.
        var kills: [(server: Int, at: ContinuousClock.Instant, posted: Int)] = []
        // What each origin had acknowledged when beta's current life began: its tail must have
        // that much before it is killed (a kill while a life's catch-up is still on its way to
        // the tail would hide posted events from the test, not from the bus).
        var startedAt = (alpha: 0, gamma: 0)
        for step in plan {
            try await Task.sleep(for: .milliseconds(Int.random(in: 300...900)))
            switch step {
            case .receiver:
                // Caught up by this life or an earlier one: once the posters are done, a life
                // that starts after its predecessor took in everything has nothing to receive.
                let caughtUp = await settle(timeout: patience) {
                    lives.map { $0.last("alpha") }.max()! >= startedAt.alpha
                        && lives.map { $0.last("gamma") }.max()! >= startedAt.gamma
                }
                #expect(caughtUp, "life \(lives.count) of beta never caught up to alpha \(startedAt.alpha), gamma \(startedAt.gamma): its tail has \(lives.last!.count("alpha")) of alpha up to \(lives.last!.last("alpha")), \(lives.last!.count("gamma")) of gamma up to \(lives.last!.last("gamma")), gaps \(lives.last!.gaps.value)\n\(beta.health)\n\(beta.daemon?.output.suffix(4000) ?? "")\n\(servers.output)")
                try await Task.sleep(for: .milliseconds(Int.random(in: 0...300)))
                await beta.kill()
                startedAt = (alphaPoster.acknowledged, gammaPoster.acknowledged)
                try await beta.start()
                lives.append(try OriginTail(beta.socket))
            case .server, .serverStaysDown:
                let index = servers.killNext()
                let killed = ContinuousClock.now
                kills.append((index, killed, gammaPoster.acknowledged))
                if step == .serverStaysDown {
                    let mark = gammaPoster.acknowledged
                    let resumed = await settle(timeout: patience) { alphaTail.last("gamma") > mark || gammaPoster.isDone }
                    #expect(resumed, "alpha took in nothing of gamma's posted after n\(index + 1)'s death while it stayed down\nalpha: \(alpha.daemon?.output.suffix(3000) ?? "")\n\(servers.output)")
                    stalls.append(String(format: "n%d down: alpha took in gamma's events posted after its death %.1f s after it", index + 1, seconds(killed.duration(to: .now))))
                } else {
                    try await Task.sleep(for: .milliseconds(Int.random(in: 200...1_000)))
                }
                try servers.start(index)
                let restarted = ContinuousClock.now
                // The stall: until alpha takes in a gamma event posted after the restart.
                let mark = gammaPoster.acknowledged
                if gammaPoster.isDone {
                    stalls.append("n\(index + 1): gamma had posted all it posts, no stall to measure")
                } else if await settle(timeout: patience, { alphaTail.last("gamma") > mark }) {
                    stalls.append(String(format: "n%d down %.1f s, alpha caught up with gamma %.1f s after its restart",
                                         index + 1, seconds(killed.duration(to: restarted)), seconds(restarted.duration(to: .now))))
                } else if let crashed = crashedInNATS([alpha, gamma, beta]) {
                    return recordNATSCrash(of: crashed)
                } else {
                    Issue.record("alpha took in nothing of gamma's after n\(index + 1)'s restart\nalpha: \(alpha.daemon?.output.suffix(3000) ?? "")\n\(servers.output)")
                }
            }
        }
        alphaPoster.stop()
        gammaPoster.stop()
        let expected = (alpha: alphaPoster.acknowledged, gamma: gammaPoster.acknowledged)
        let complete = await settle(timeout: patience) {
            alphaTail.count("gamma") >= expected.gamma && gammaTail.count("alpha") >= expected.alpha
                && Set(lives.flatMap { $0.numbers("alpha") }).count >= expected.alpha
                && Set(lives.flatMap { $0.numbers("gamma") }).count >= expected.gamma
        }
        if !complete, let crashed = crashedInNATS([alpha, gamma, beta]) { return recordNATSCrash(of: crashed) }
        #expect(complete, """
            alpha has \(alphaTail.count("gamma")) of gamma's \(expected.gamma), gamma \(gammaTail.count("alpha")) of alpha's \(expected.alpha)
            alpha status: \(alpha.bridgeStatus as Any)
            gamma status: \(gamma.bridgeStatus as Any)
            beta status: \(beta.bridgeStatus as Any)
            \([alpha, gamma, beta].map(\.health).joined(separator: "\n"))
            alpha: \(alpha.daemon?.output.suffix(3000) ?? "")
            \(servers.output)
            """)
        try await Task.sleep(for: .seconds(3))  // past ack_wait: a redelivery or duplicate would have come
        // Never killed: exactly once, in the origin's order.
        // Compared as one Bool: the message says what differs, not 40 000 numbers twice.
        let alphaSawGammaExactly = alphaTail.numbers("gamma") == Array(1...Int64(expected.gamma))
        let gammaSawAlphaExactly = gammaTail.numbers("alpha") == Array(1...Int64(expected.alpha))
        #expect(alphaSawGammaExactly, "alpha's view of gamma: \(alphaTail.describe("gamma"))")
        #expect(gammaSawAlphaExactly, "gamma's view of alpha: \(gammaTail.describe("alpha"))")
        // Killed: everything in some life; each life in order, nothing twice.
        var postedAgain = 0
        for origin in ["alpha", "gamma"] {
            let total = origin == "alpha" ? expected.alpha : expected.gamma
            let all = lives.flatMap { $0.numbers(origin) }
            // A count, not the sets: a failure's message must not bury the others under 10 000 numbers.
            let missing = Set(1...Int64(total)).subtracting(all).sorted()
            #expect(missing.isEmpty, "beta lost \(missing.count) of \(origin)'s, from \(missing.prefix(20))\n\(beta.health)")
            postedAgain += all.count - Set(all).count
            for (index, life) in lives.enumerated() {
                let numbers = life.numbers(origin)
                #expect(zip(numbers, numbers.dropFirst()).allSatisfy { $0 < $1 }, "beta's life \(index + 1), \(origin): \(life.describe(origin, from: nil))")
            }
        }
        for tail in [alphaTail, gammaTail] + lives { #expect(tail.gaps.value.isEmpty, "gaps: \(tail.gaps.value)") }
        for host in [alpha, gamma, beta] { #expect(host.count("lost") == 0, "\(host.health)\nstatus: \(host.bridgeStatus as Any)") }
        // nats-server 2.9.10 can leave a restarted cluster server's copy of the stream behind; a
        // host's consumer there is made again (docs/fleet-durability.md, Resume). How often, from the logs.
        let logs = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        func lines(_ containing: String, in files: [String]) -> Int {
            files.reduce(0) { $0 + ((try? String(contentsOfFile: $1, encoding: .utf8)) ?? "").components(separatedBy: containing).count - 1 }
        }
        let stalledCatchUps = lines("Catchup for stream", in: (1...servers.servers.count).flatMap { index in
            ((try? FileManager.default.contentsOfDirectory(atPath: directory.path + "/n\(index)")) ?? [])
                .filter { $0.hasSuffix(".log") }.map { directory.path + "/n\(index)/" + $0 }
        })
        let behind = lines("copy of the stream is behind", in: logs.filter { $0.hasPrefix("eventbusd-") }.map { directory.path + "/" + $0 })
        print("""
            durable chaos (\(servers.servers.count) server(s)): \(expected.alpha) + \(expected.gamma) events, \
            servers' "Catchup for stream … stalled" lines: \(stalledCatchUps), consumers made again as behind their stream's leader: \(behind), \
            \(plan.filter { $0 == .server }.count) server deaths, \(lives.count - 1) kills of beta, \
            \(postedAgain) posted again in a later life of beta, republished by alpha/gamma: \
            \(alpha.count("export_republished"))/\(gamma.count("export_republished")), \
            stored ahead of earlier ones and put back in order by alpha/gamma/beta's last life: \
            \(alpha.count("reordered"))/\(gamma.count("reordered"))/\(beta.count("reordered")); \(stalls.joined(separator: "; ")); \
            from each kill to alpha's import of the first gamma event posted after it: \(kills.map { kill in
                String(format: "n%d %.1f s", kill.server + 1, alphaTail.arrival("gamma", kill.posted + 1).map { seconds(kill.at.duration(to: $0)) } ?? -1)
            }.joined(separator: ", "))
            """)
        for host in [alpha, gamma, beta] { await host.kill(SIGTERM) }
    }
}

/// The host whose eventbusd crashed inside libnats, if one did: nats.c 3.4.1 (Debian 12's) can
/// crash in its own code after a reconnect (docs/fleet-durability.md, "Resume" and "Fetching").
private func crashedInNATS(_ hosts: [BridgedHost]) -> String? {
    hosts.first { host in
        guard let output = host.daemon?.output else { return false }
        return output.contains(" crashed:") && output.contains("libnats")
    }?.name
}

/// Records that crash as the known, intermittent issue it is — not hidden, not a failure of
/// the bridge's promise — and the run ends: its other checks mean nothing without that host.
private func recordNATSCrash(of host: String) {
    withKnownIssue("nats.c 3.4.1 crashed \(host)'s eventbusd in its own code (docs/fleet-durability.md, Fetching)", isIntermittent: true) {
        Issue.record("\(host) crashed inside libnats")
    }
}

/// Polls `condition` every 50 ms (the tails' sets are large: every 2 ms would cost the machine
/// the CPU the hosts need) until it holds or `timeout` passes.
private func settle(timeout: Duration, _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(50))
    }
    return condition()
}

private func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

/// Posts `load.tick` with n = 1, 2, 3… to a host from a thread of its own, 50 at a time every
/// 40 ms (up to about 1 200 a second: a stream that lasts the whole test, with publishes in
/// flight at each server death), at most `limit`.
final class Poster: Sendable {
    private let posted = Collected<Int>(0)
    private let stopping = Collected<Bool>(false)
    private let done = DispatchSemaphore(value: 0)

    init(_ socket: String, limit: Int) {
        self.limit = limit
        let posted = posted, stopping = stopping, done = done
        Thread.detachNewThread {
            defer { done.signal() }
            while !stopping.value, posted.value < limit {
                let first = posted.value + 1
                do { try post(socket, "load.tick", first...(first + 49)) } catch { return }
                posted.update { $0 += 50 }
                usleep(40_000)
            }
        }
    }

    /// Events the host's `post` acknowledged.
    var acknowledged: Int { posted.value }
    private let limit: Int
    /// Whether it has posted all it posts.
    var isDone: Bool { posted.value >= limit }

    func stop() {
        stopping.update { $0 = true }
        done.wait()
    }
}

/// The `load.` events a host posts, by origin host (n in arrival order), and its `bridge.gap`s,
/// from its first event (replay) on, read by a thread of its own.
final class OriginTail: Sendable {
    private let byOrigin = Collected<[String: [Int64]]>([:])
    private let arrivals = Collected<[String: [ContinuousClock.Instant]]>([:])
    let gaps = Collected<[String]>([])

    init(_ socket: String) throws {
        let (connection, _) = try rawConnection(socket)
        try connection.send(["op": "subscribe", "patterns": ["load.>", "bridge.gap"], "since_seq": .int(1)])
        guard try connection.readJSON()?["type"] == "subscribed" else { throw POSIXError(.EPROTO) }
        connection.setReceiveTimeout(seconds: 0)
        let byOrigin = byOrigin, gaps = gaps, arrivals = arrivals
        nonisolated(unsafe) let reader = connection
        Thread.detachNewThread {
            _ = try? reader.forEachLine { bytes in
                guard let line = try? JSON.parse(bytes) else { return true }
                if line["type"] == "gap" {
                    // The host dropped events for this tail, too slow a reader: said in a failure.
                    gaps.update { $0.append("tail gap \(line["dropped"]?.intValue ?? -1)") }
                }
                guard line["type"] == "event" else { return true }
                let fields = line["fields"]
                if line["name"]?.stringValue == "bridge.gap" {
                    gaps.update { $0.append("\(fields?["kind"]?.stringValue ?? "?") \(fields?["dropped"]?.intValue ?? -1)") }
                } else if let origin = fields?["@origin.host"]?.stringValue, let n = fields?["n"]?.intValue {
                    byOrigin.update { $0[origin, default: []].append(n) }
                    arrivals.update { $0[origin, default: []].append(.now) }
                }
                return true
            }
        }
    }

    func numbers(_ origin: String) -> [Int64] { byOrigin.value[origin] ?? [] }
    func count(_ origin: String) -> Int { byOrigin.update { $0[origin]?.count ?? 0 } }
    func last(_ origin: String) -> Int { byOrigin.update { Int($0[origin]?.last ?? 0) } }

    /// When event `n` of `origin` first arrived.
    func arrival(_ origin: String, _ n: Int) -> ContinuousClock.Instant? {
        let (numbers, times) = (byOrigin.value[origin] ?? [], arrivals.value[origin] ?? [])
        return numbers.firstIndex(of: Int64(n)).flatMap { $0 < times.count ? times[$0] : nil }
    }

    /// Where the numbers first go wrong, for a failure's message: not 1, 2, 3… from `first`, or
    /// (`first` nil: a later life of a host, which starts anywhere) not increasing.
    func describe(_ origin: String, from first: Int64? = 1) -> String {
        let numbers = numbers(origin)
        var seen = Set<Int64>()
        for (index, n) in numbers.enumerated() {
            let wrong = if index == 0 { first.map { n != $0 } ?? false } else if first == nil { n <= numbers[index - 1] } else { n != numbers[index - 1] + 1 }
            if wrong || seen.contains(n) {
                return "\(numbers.count) events; at index \(index): … \(numbers[max(0, index - 3)..<min(numbers.count, index + 4)].map(String.init).joined(separator: ", ")) …"
            }
            seen.insert(n)
        }
        return "\(numbers.count) events, \(numbers.first ?? 0)…\(numbers.last ?? 0) in order"
    }
}
