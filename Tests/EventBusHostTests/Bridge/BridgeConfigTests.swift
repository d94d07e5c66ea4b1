import EventBusHost
import EventBusKit
import Foundation
import NATSBridge
import Testing

/// `bridge.nats` in the host's config: plain values when right, file:line:key errors when not.
@Suite struct BridgeConfigTests {
    func load(_ yaml: String) throws -> Result<HostConfig, ConfigError> {
        let directory = try TemporaryDirectory()
        try directory.write("seed.nk", "SUAEXAMPLE\n")
        let file = try directory.write("eventbus.yaml", yaml)
        do { return .success(try HostConfig.load(from: file)) } catch { return .failure(error) }
    }

    func error(_ yaml: String) throws -> ConfigError {
        switch try load(yaml) {
        case .success: Issue.record("loaded without error:\n\(yaml)"); return ConfigError(file: "", line: nil, key: "", message: "")
        case .failure(let error): return error
        }
    }

    @Test func aFullBridgeSectionBecomesPlainValues() throws {
        let config = try load("""
            bridge:
              nats:
                servers: [nats://10.0.0.5:4222, nats://10.0.0.6:4222]
                host: web-1
                nkey: {public: UAEXAMPLE, seed_file: seed.nk}
                export: ["deploy.>", "app.*"]
                import: [">"]
                ping_interval: 5s
                write_deadline: 500ms
                durable: {stream: FLEET, max_age: 2h, max_bytes: 1000000, max_msgs: 500, ack_wait: 10s, start: all, js_domain: hub, replicas: 3, consumer_replicas: 3}
            """).get()
        let bridge = try #require(config.bridge)
        #expect(bridge.servers == ["nats://10.0.0.5:4222", "nats://10.0.0.6:4222"])
        #expect(bridge.host == "web-1")
        guard case .nkey(let publicKey, let seed) = bridge.authentication else { Issue.record("not an nkey"); return }
        #expect(publicKey == "UAEXAMPLE" && seed.hasSuffix("/seed.nk") && seed.hasPrefix("/"))
        #expect(bridge.export.map(\.description) == ["deploy.>", "app.*"])
        #expect(bridge.import.map(\.description) == [">"])
        #expect(bridge.pingInterval == .seconds(5))
        #expect(bridge.writeDeadline == .milliseconds(500))
        let durable = try #require(bridge.durable)
        #expect(durable.stream == "FLEET" && durable.maxAge == .seconds(7200) && durable.maxBytes == 1_000_000)
        #expect(durable.maxMessages == 500 && durable.ackWait == .seconds(10) && durable.startAtBeginning)
        #expect(durable.domain == "hub")
        #expect(durable.replicas == 3 && durable.consumerReplicas == 3)
    }

    @Test func theHostDefaultsToTheHostname() throws {
        let config = try load("bridge:\n  nats:\n    servers: [nats://127.0.0.1:4222]\n    export: [\">\"]\n").get()
        var hostname = ProcessInfo.processInfo.hostName
        if let dot = hostname.firstIndex(of: ".") { hostname = String(hostname[..<dot]) }
        #expect(config.bridge?.host == hostname)
        #expect(config.bridge?.durable == nil)
        let durable = try load("bridge:\n  nats:\n    servers: [nats://a:1]\n    import: [\">\"]\n    durable: {}\n").get()
        #expect(durable.bridge?.durable?.domain == nil)
        #expect(durable.bridge?.durable?.consumerReplicas == 1)
    }

    @Test func theBridgesByteBoundsAreSizes() throws {
        let defaults = try #require(try load("bridge:\n  nats:\n    servers: [nats://a:1]\n    export: [\">\"]\n").get().bridge)
        #expect(defaults.exportBufferBytes == 64 << 20 && defaults.pendingBytes == 64 << 20)
        #expect(defaults.exportBuffer == 100_000 && defaults.pendingLimit == 65_536)

        let given = try #require(try load("""
            bridge:
              nats:
                servers: [nats://a:1]
                export: [">"]
                import: [">"]
                export_buffer_bytes: 1MiB
                pending_bytes: 16 MB
                export_buffer: 500
            """).get().bridge)
        #expect(given.exportBufferBytes == 1 << 20)
        #expect(given.pendingBytes == 16 << 20)  // MB means MiB, as everywhere in the config
        #expect(given.exportBuffer == 500)
        let plain = try #require(try load("bridge:\n  nats:\n    servers: [nats://a:1]\n    import: [\">\"]\n    pending_bytes: 1048576\n").get().bridge)
        #expect(plain.pendingBytes == 1_048_576)

        let notASize = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    export: [\">\"]\n    export_buffer_bytes: lots\n")
        #expect(notASize.line == 5 && notASize.key == "bridge.nats.export_buffer_bytes")
        #expect(notASize.message.contains("expected a size such as 64MiB"))
        let zero = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    export: [\">\"]\n    export_buffer_bytes: 0\n")
        #expect(zero.line == 5 && zero.key == "bridge.nats.export_buffer_bytes" && zero.message.contains("must be at least"))
        let noPending = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    import: [\">\"]\n    pending_bytes: 0\n")
        #expect(noPending.line == 5 && noPending.key == "bridge.nats.pending_bytes" && noPending.message.contains("must be at least"))
        let tooMuch = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    import: [\">\"]\n    pending_bytes: 2GiB\n")
        #expect(tooMuch.line == 5 && tooMuch.key == "bridge.nats.pending_bytes")
        #expect(tooMuch.message == "must be less than 2 GiB (nats.c counts in 32 bits)")
        let file = try #require(try? error("bridge:\n  nats:\n    servers: [nats://a:1]\n    import: [\">\"]\n    pending_bytes: [1]\n").file)
        #expect(file.hasSuffix("eventbus.yaml"))
    }

    @Test func mistakesNameLineAndKey() throws {
        let badPattern = try error("""
            bridge:
              nats:
                servers: [nats://127.0.0.1:4222]
                export: ["deploy..x"]
            """)
        #expect(badPattern.line == 4 && badPattern.key == "bridge.nats.export[0]")
        #expect(badPattern.message.contains("token 2 is empty"))

        let badHost = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    host: web.1\n    export: [\">\"]\n")
        #expect(badHost.line == 4 && badHost.key == "bridge.nats.host")
        #expect(badHost.message.contains("cannot be one NATS subject token"))

        let twoWays = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    token: abc\n    creds: x.creds\n    import: [\">\"]\n")
        #expect(twoWays.line == 3 && twoWays.key == "bridge.nats")
        #expect(twoWays.message == "give one way to authenticate, not token and creds")

        let nothing = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n")
        #expect(nothing.message.contains("neither exports nor imports"))

        let noServers = try error("bridge:\n  nats:\n    export: [\">\"]\n")
        #expect(noServers.key == "bridge.nats" && noServers.message.contains("needs servers"))

        let missingFile = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    creds: /nonexistent/x.creds\n    export: [\">\"]\n")
        #expect(missingFile.line == 4 && missingFile.key == "bridge.nats.creds")
        #expect(missingFile.message.contains("cannot read /nonexistent/x.creds"))

        let typo = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    export: [\">\"]\n    durable: {stream: S, max_agee: 1h}\n")
        #expect(typo.line == 5 && typo.key == "bridge.nats.durable.max_agee")

        let start = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    import: [\">\"]\n    durable:\n      start: oldest\n")
        #expect(start.line == 6 && start.message == "expected new or all, found \"oldest\"")

        let domain = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    import: [\">\"]\n    durable:\n      js_domain: hub.eu\n")
        #expect(domain.line == 6 && domain.key == "bridge.nats.durable.js_domain")
        #expect(domain.message.contains("no '.', '*', '>' or whitespace"))

        let consumerReplicas = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    import: [\">\"]\n    durable:\n      consumer_replicas: 7\n")
        #expect(consumerReplicas.line == 6 && consumerReplicas.key == "bridge.nats.durable.consumer_replicas")
        #expect(consumerReplicas.message.contains("0 (the stream's replicas) to 5"))
        let negative = try error("bridge:\n  nats:\n    servers: [nats://a:1]\n    import: [\">\"]\n    durable: {consumer_replicas: -1}\n")
        #expect(negative.line == 5 && negative.key == "bridge.nats.durable.consumer_replicas")

        let kind = try error("bridge:\n  kafka: {}\n")
        #expect(kind.key == "bridge.kafka" && kind.message.contains("expected one of: nats"))
    }
}
