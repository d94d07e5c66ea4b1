import EventBusKit
import Foundation
import Logging
import NATSBridge
import Testing
import TestSupport

/// Durable mode behind a leaf node (`js_domain`): a hub nats-server holds JetStream in domain
/// `hub`; a leaf nats-server, with a JetStream domain of its own, links to it. A host on the leaf
/// names the hub's domain, so its stream and consumer live on the hub, and a host on the hub
/// takes its events in.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct BridgeLeafNodeTests {
    @Test func aHostBehindALeafNodeUsesTheHubsJetStreamDomain() async throws {
        let directory = try TemporaryDirectory("bridge-leaf")
        // Every port picked at once, so no two are the same.
        let ports = try freeLoopbackPorts(5)
        let (leafPort, hubMonitor, leafMonitor) = (ports[0], ports[1], ports[2])
        try FileManager.default.createDirectory(atPath: directory.at("hub"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory.at("leaf"), withIntermediateDirectories: true)
        let hub = try NATSServer(storage: directory.at("hub"), port: ports[3], configuration: """
            jetstream { domain: hub }
            leafnodes { listen: "127.0.0.1:\(leafPort)" }
            http: "127.0.0.1:\(hubMonitor)"
            """)
        let leaf = try NATSServer(storage: directory.at("leaf"), port: ports[4], configuration: """
            jetstream { domain: leaf }
            leafnodes { remotes: [{ url: "nats-leaf://127.0.0.1:\(leafPort)" }] }
            http: "127.0.0.1:\(leafMonitor)"
            """)
        defer { leaf.stop(); hub.stop() }
        #expect(await eventually { hub.output.contains("Leafnode connection created") })

        func bridge(_ host: String, server: NATSServer, bus: Bus, export: [String] = [], import imports: [String] = []) throws -> NATSBridge {
            var config = BridgeConfig(servers: [server.url], host: host)
            config.export = try export.map(EventPattern.init)
            config.import = try imports.map(EventPattern.init)
            var durable = BridgeConfig.Durable()
            durable.domain = "hub"
            config.durable = durable
            let bridge = NATSBridge(config: config, bus: bus, stateDirectory: directory.at("state-\(host)"),
                                    logger: Logger(label: "bridge-\(host)"))
            try bridge.start()
            return bridge
        }
        let edge = Bus(), core = Bus()
        let onLeaf = try bridge("edge", server: leaf, bus: edge, export: ["app.>"])
        let onHub = try bridge("core", server: hub, bus: core, import: ["app.>"])
        defer { onLeaf.stop(); onHub.stop() }
        let received = Collected<[Event]>([])
        let subscription = try core.publisher(for: "app.>").sink { event in received.update { $0.append(event) } }
        defer { subscription.cancel() }
        // Until the hub host's consumer is bound and the leaf host has found the stream.
        await warmUp(edge, received)
        for n in 1...20 { edge.post("app.deploy", fields: ["n": .int(Int64(n))]) }
        #expect(await eventually { received.value.filter { $0.name == "app.deploy" }.count == 20 })
        let deploys = received.value.filter { $0.name == "app.deploy" }
        #expect(deploys.compactMap { $0["n"]?.intValue } == Array(1...20))
        #expect(deploys.allSatisfy { $0.origin?.host == "edge" })
        // The stream is the hub's: the leaf's own JetStream (where a host without js_domain
        // would have made one) holds none.
        #expect(try streams(monitor: hubMonitor) == 1)
        #expect(try streams(monitor: leafMonitor) == 0)
        #expect(onLeaf.statistics.lastError == nil)
    }

    /// How many streams a server's JetStream holds, from its monitoring endpoint (`/jsz`).
    func streams(monitor port: Int) throws -> Int? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        defer { close(fd) }
        var patience = timeval(tv_sec: 10, tv_usec: 0)  // a guard against a hang, not a wait relied on
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
        let request = Array("GET /jsz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        guard write(fd, request, request.count) == request.count else { throw POSIXError(.EIO) }
        var response: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(fd, &chunk, chunk.count)
            guard count > 0 else { break }  // the server closes after an HTTP/1.0 answer
            response += chunk[..<count]
        }
        let text = String(decoding: response, as: UTF8.self)
        guard let body = text.range(of: "\r\n\r\n").map({ text[$0.upperBound...] }),
              let json = try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]
        else { return nil }
        return json["streams"] as? Int
    }
}
