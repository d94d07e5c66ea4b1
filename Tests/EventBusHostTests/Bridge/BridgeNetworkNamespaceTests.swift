import ControlProtocol
import Foundation
import Synchronization
import Testing
import TestSupport

/// Hosts on a network of their own: two eventbusd processes, each in a network namespace linked
/// by a veth pair to a third namespace that holds the nats-server (addresses exist only inside
/// these namespaces). The importing host's link is cut (`ip link set … down`) for 3 s while the
/// other host posts: core mode announces the gap, durable mode resumes exactly.
@Suite(.serialized, .enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"),
       .enabled(if: NetworkLab.isPermitted, "skipped: cannot create network namespaces here (ip netns needs CAP_SYS_ADMIN)"), .tags(.realDaemon, .nats), .skippable(.realDaemon, .nats))
struct BridgeNetworkNamespaceTests {
    @Test(arguments: [false, true])
    func aCutLinkIsAnnouncedInCoreModeAndResumedExactlyInDurableMode(durable: Bool) async throws {
        let directory = try TemporaryDirectory("bridge-netns")
        let settings = """
            export: ["load.>"]
            import: ["load.>"]
            ping_interval: 500ms
            max_pings_out: 2
            reconnect_wait: 100ms
            max_reconnect_wait: 1s
            """ + (durable ? "\ndurable: {stream: NETBUS, max_age: 1h, ack_wait: 2s}" : "")
        let pair = try NetworkedPair(subnet: 201, directory: directory, bridge: settings)
        defer { pair.remove() }  // also when the test fails: the namespaces (and their links) go
        let a = pair.alpha, b = pair.beta
        try await b.start()
        try await a.start()
        if durable { #expect(await eventually { b.daemon?.output.contains("importing from stream NETBUS") == true }) }
        let tailB = try TailCollector(b.socket, ["load.>", "bridge.gap"])
        try await Task.sleep(for: .milliseconds(200))
        try post(a.socket, "load.tick", 1...10)
        #expect(await eventually { tailB.named("load.").count == 10 })

        let cut = Date()
        try pair.setBetaLink(up: false)
        try post(a.socket, "load.tick", 11...60)
        try await Task.sleep(for: .seconds(3))
        try pair.setBetaLink(up: true)
        #expect(await eventually { b.count("reconnects") >= 1 },
                "beta: \(b.daemon?.output ?? "")\nstatus B: \(String(describing: b.bridgeStatus))")
        if !durable {
            // Core NATS delivers to beta only once the server has its subscription again, and
            // the reconnect is reported before nats.c's re-sent SUB is processed: an event in
            // between is lost, as core mode says. Probe (n ≥ 1001) until one arrives.
            var arrived = false
            for probe in 1001...1600 where !arrived {
                try post(a.socket, "load.probe", probe...probe)
                arrived = await eventually(timeout: .milliseconds(100)) { !tailB.named("load.probe").isEmpty }
            }
            #expect(arrived, "beta: \(b.daemon?.output ?? "")")
        }
        try post(a.socket, "load.tick", 61...70)

        if durable {
            #expect(await eventually { Set(tailB.keys("load.")).count == 70 },
                    "alpha: \(a.daemon?.output ?? "")\nbeta: \(b.daemon?.output ?? "")\nstatus B: \(String(describing: b.bridgeStatus))")
            try await Task.sleep(for: .seconds(1))  // anything extra (a duplicate) would arrive now
            let keys = tailB.keys("load.")
            #expect(keys.count == 70, "duplicates: \(keys.count - Set(keys).count)")
            #expect(Set(keys) == Set((1...70).map { "alpha:\($0)" }))
            #expect(tailB.named("bridge.gap").isEmpty)
            #expect(b.count("lost") == 0)
        } else {
            #expect(await eventually { tailB.keys("load.").contains("alpha:70") && !tailB.named("bridge.gap").isEmpty },
                    "beta: \(b.daemon?.output ?? "")\nstatus B: \(String(describing: b.bridgeStatus))")
            let gap = try #require(tailB.named("bridge.gap").first?["fields"])
            #expect(gap["kind"] == "disconnected")
            #expect(gap["bridge_host"] == "beta")
            #expect(gap["dropped"] == nil)  // core NATS cannot say how many
            let from = try #require(ISO8601DateFormatter.withFractions.date(from: gap["from"]?.stringValue ?? ""))
            let until = try #require(ISO8601DateFormatter.withFractions.date(from: gap["until"]?.stringValue ?? ""))
            #expect(from >= cut.addingTimeInterval(-1) && until > from)
            // Whatever arrived arrived once, and everything after the link came back arrived.
            let keys = tailB.keys("load.")
            #expect(keys.count == Set(keys).count)
            #expect(Set((61...70).map { "alpha:\($0)" }).isSubset(of: Set(keys)))
        }
        await a.kill(SIGTERM)
        await b.kill(SIGTERM)
    }
}

/// A link that goes down and up again and again while events flow, in durable mode: each
/// reconnect re-creates the importer's consumer while messages for it are on their way. Every
/// event arrives once. (The crash a re-created pull subscription risked — nats.c 3.4 freeing one
/// its read loop still handles, seen once in a full run — is too rare to reproduce here: 80
/// rounds of this test without the guard against it did not.)
@Suite(.serialized, .enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"),
       .enabled(if: NetworkLab.isPermitted, "skipped: cannot create network namespaces here (ip netns needs CAP_SYS_ADMIN)"), .tags(.realDaemon, .nats), .skippable(.realDaemon, .nats))
struct BridgeFlappingLinkTests {
    @Test func aFlappingLinkInDurableModeLosesNothingAndDuplicatesNothing() async throws {
        let directory = try TemporaryDirectory("bridge-flap")
        let settings = """
            export: ["load.>"]
            import: ["load.>"]
            ping_interval: 200ms
            max_pings_out: 2
            reconnect_wait: 50ms
            max_reconnect_wait: 200ms
            durable: {stream: FLAPBUS, max_age: 1h, ack_wait: 1s}
            """
        let pair = try NetworkedPair(subnet: 202, directory: directory, bridge: settings)
        defer { pair.remove() }
        let a = pair.alpha, b = pair.beta
        try await b.start()
        try await a.start()
        #expect(await eventually { b.daemon?.output.contains("importing from stream FLAPBUS") == true })
        let tailB = try TailCollector(b.socket, ["load.>"])
        let rounds = 6, perRound = 100
        for round in 0..<rounds {
            let first = round * perRound
            try post(a.socket, "load.tick", (first + 1)...(first + perRound / 2))
            try pair.setBetaLink(up: false)
            try post(a.socket, "load.tick", (first + perRound / 2 + 1)...(first + perRound))
            #expect(await eventually { b.count("disconnects") > round || b.daemon?.process.isRunning == false })
            try pair.setBetaLink(up: true)
            #expect(await eventually { b.count("reconnects") > round || b.daemon?.process.isRunning == false },
                    "beta: \(b.daemon?.output.suffix(4000) ?? "")")
            guard b.daemon?.process.isRunning == true else { break }
        }
        #expect(b.daemon?.process.isRunning == true, "beta: \(b.daemon?.output.suffix(6000) ?? "")")
        let total = rounds * perRound
        #expect(await eventually { Set(tailB.keys("load.")).count == total },
                """
                missing: \(Set(1...total).subtracting(tailB.keys("load.").compactMap { Int($0.split(separator: ":").last ?? "") }).sorted())
                alpha: \(a.daemon?.output.suffix(3000) ?? "")
                status A: \(String(describing: a.bridgeStatus))
                beta: \(b.daemon?.output.suffix(4000) ?? "")
                status B: \(String(describing: b.bridgeStatus))
                """)
        try await Task.sleep(for: .seconds(1))  // anything extra (a duplicate) would arrive now
        let keys = tailB.keys("load.")
        #expect(keys.count == total, "duplicates: \(keys.count - Set(keys).count)")
        #expect(b.count("lost") == 0)
        await a.kill(SIGTERM)
        await b.kill(SIGTERM)
    }
}

/// Two bridged eventbusd hosts, alpha and beta, each in a network namespace of its own, linked
/// by a veth pair (10.`subnet`.1.0/30 and 10.`subnet`.2.0/30) to a third that runs nats-server;
/// beta's link can be cut. ``remove()`` stops the server and removes the namespaces.
final class NetworkedPair: @unchecked Sendable {
    // @unchecked: used by one test at a time.
    let alpha: BridgedHost
    let beta: BridgedHost
    private let lab = NetworkLab()
    private let nats: NATSServer
    private let betaLink: NetworkLab.Link

    init(subnet: Int, directory: TemporaryDirectory, bridge settings: String) throws {
        do {
            let server = try lab.namespace("srv"), alphaSpace = try lab.namespace("a"), betaSpace = try lab.namespace("b")
            try lab.link(server, "10.\(subnet).1.1", alphaSpace, "10.\(subnet).1.2")
            betaLink = try lab.link(server, "10.\(subnet).2.1", betaSpace, "10.\(subnet).2.2")
            nats = try NATSServer(storage: directory.path, port: 4222, wrapper: lab.exec(server), address: "0.0.0.0")
            alpha = try BridgedHost("alpha", server: nats, url: "nats://10.\(subnet).1.1:4222", wrapper: lab.exec(alphaSpace),
                                    in: directory, bridge: settings)
            beta = try BridgedHost("beta", server: nats, url: "nats://10.\(subnet).2.1:4222", wrapper: lab.exec(betaSpace),
                                   in: directory, bridge: settings)
        } catch {
            lab.remove()
            throw error
        }
    }

    func setBetaLink(up: Bool) throws { try lab.setLink(betaLink, up: up) }

    func remove() {
        nats.stop()
        lab.remove()
    }
}

/// Network namespaces and veth links made for one test (names carry this process's id and the
/// lab's number, so runs and suites in parallel do not meet), removed by ``remove()``.
final class NetworkLab: @unchecked Sendable {
    // @unchecked: used by one test at a time.
    static let ip = "/usr/sbin/ip"
    private static let made = Atomic<Int>(0)
    /// Short: a veth device's name (tag + `l1a`) must fit in 15 bytes.
    private let tag = "eb\(getpid() % 100_000)\(NetworkLab.made.wrappingAdd(1, ordering: .relaxed).oldValue % 100)"
    private var namespaces: [String] = []
    private var links = 0

    /// Whether this process may create network namespaces: it tries once.
    static let isPermitted: Bool = {
        guard access(ip, X_OK) == 0 else { return false }
        let probe = "eb\(getpid() % 100_000)-probe"
        guard (try? run([ip, "netns", "add", probe])) != nil else { return false }
        _ = try? run([ip, "netns", "del", probe])
        return true
    }()

    struct Link {
        let namespace: String
        let device: String
    }

    /// A new namespace with its loopback up.
    func namespace(_ name: String) throws -> String {
        let namespace = "\(tag)-\(name)"
        try Self.run([Self.ip, "netns", "add", namespace])
        namespaces.append(namespace)
        try Self.run([Self.ip, "-n", namespace, "link", "set", "lo", "up"])
        return namespace
    }

    /// A veth pair between two namespaces, each end with its /30 address; returns the second end.
    @discardableResult
    func link(_ first: String, _ firstAddress: String, _ second: String, _ secondAddress: String) throws -> Link {
        links += 1
        let one = "\(tag)l\(links)a", two = "\(tag)l\(links)b"
        try Self.run([Self.ip, "link", "add", one, "netns", first, "type", "veth", "peer", "name", two, "netns", second])
        for (namespace, device, address) in [(first, one, firstAddress), (second, two, secondAddress)] {
            try Self.run([Self.ip, "-n", namespace, "addr", "add", address + "/30", "dev", device])
            try Self.run([Self.ip, "-n", namespace, "link", "set", device, "up"])
        }
        return Link(namespace: second, device: two)
    }

    func setLink(_ link: Link, up: Bool) throws {
        try Self.run([Self.ip, "-n", link.namespace, "link", "set", link.device, up ? "up" : "down"])
    }

    /// The command prefix that runs a program inside `namespace`.
    func exec(_ namespace: String) -> [String] { [Self.ip, "netns", "exec", namespace] }

    /// Deletes the namespaces (their veth ends go with them).
    func remove() {
        for namespace in namespaces.reversed() { _ = try? Self.run([Self.ip, "netns", "del", namespace]) }
        namespaces.removeAll()
    }

    struct CommandFailed: Error, CustomStringConvertible {
        let description: String
    }

    @discardableResult
    static func run(_ command: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw CommandFailed(description: "\(command.joined(separator: " ")): \(text)")
        }
        return text
    }
}
