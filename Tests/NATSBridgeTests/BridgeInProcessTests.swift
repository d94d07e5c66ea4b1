import EventBusKit
import Foundation
import Logging
import NATSBridge
import Testing
import TestSupport

/// Two buses in this process, each with its own bridge, through a real nats-server.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct BridgeInProcessTests {
    let directory: TemporaryDirectory
    let server: NATSServer

    init() throws {
        directory = try TemporaryDirectory("bridge-test")
        server = try NATSServer(storage: directory.path)
    }

    func bridge(_ host: String, bus: Bus, export: [String] = [], import imports: [String] = [],
                durable: Bool = false) throws -> NATSBridge {
        var config = BridgeConfig(servers: [server.url], host: host)
        config.export = try export.map(EventPattern.init)
        config.import = try imports.map(EventPattern.init)
        if durable { config.durable = BridgeConfig.Durable() }
        return try startBridge(config, bus, directory)
    }

    @Test(arguments: [false, true])
    func everyFieldTypeSurvivesTheTripWithItsOrigin(durable: Bool) async throws {
        let busA = Bus(), busB = Bus()
        let a = try bridge("alpha", bus: busA, export: ["app.>"], durable: durable)
        let b = try bridge("beta", bus: busB, import: ["app.>"], durable: durable)
        defer { a.stop(); b.stop() }
        let (received, subscription) = try collect(busB, "app.>")
        defer { subscription.cancel() }
        await warmUp(busA, received)
        let warmups = received.value.count
        let date = Date(timeIntervalSinceReferenceDate: 774_000_000.123_456_789)
        let fields: [String: FieldValue] = [
            "text": "héllo wörld, \"quoted\"", "empty": "", "count": .int(-9_223_372_036_854_775_807),
            "ratio": .double(0.1 + 0.2), "third": .double(1.0 / 3.0), "whole": .double(2.0), "flag": true, "off": false,
            "when": .date(date),
        ]
        let wall = Date(timeIntervalSinceReferenceDate: 774_000_001.5)
        let sequence = busA.post(Event(name: "app.deploy.done", source: "deployer", fields: fields, wallTime: wall))
        #expect(await eventually { received.value.contains { $0.name == "app.deploy.done" } })
        let event = try #require(received.value.first { $0.name == "app.deploy.done" })
        #expect(event.name == "app.deploy.done")
        #expect(event.source == "deployer")
        #expect(event.wallTime == wall)
        #expect(event.origin?.host == "alpha")
        #expect(event.origin?.sequence == sequence)
        var withoutOrigin = event.fields
        for key in [EventOrigin.hostField, EventOrigin.sequenceField, EventOrigin.instanceField] { withoutOrigin[key] = nil }
        #expect(withoutOrigin == fields)  // FieldValue equality: same case, same bits
        #expect(event["ratio"]?.doubleValue?.bitPattern == (0.1 + 0.2).bitPattern)
        #expect(await eventually { b.statistics.imported >= UInt64(warmups) + 1 })
    }

    @Test func aHostDropsItsOwnEchoesAndNeverReExportsImports() async throws {
        let busA = Bus(), busB = Bus()
        let a = try bridge("alpha", bus: busA, export: [">"], import: [">"])
        let b = try bridge("beta", bus: busB, export: [">"], import: [">"])
        defer { a.stop(); b.stop() }
        let (onA, subscriptionA) = try collect(busA, "ping.>")
        let (onB, subscriptionB) = try collect(busB, "ping.>")
        defer { subscriptionA.cancel(); subscriptionB.cancel() }
        #expect(await eventually { a.statistics.state == "connected" && b.statistics.state == "connected" })
        try await Task.sleep(for: .milliseconds(100))  // subscriptions reach the server
        busA.post("ping.one", fields: ["n": 1])
        #expect(await eventually { onB.value.count == 1 && a.statistics.echoesDropped == 1 })
        try await Task.sleep(for: .milliseconds(300))
        // A saw its own event once (local), B once (imported) and did not send it back.
        #expect(onA.value.count == 1)
        #expect(onA.value.first?.origin == nil)
        #expect(onB.value.count == 1)
        #expect(onB.value.first?.origin?.host == "alpha")
        #expect(b.statistics.exported == 0)
        #expect(a.statistics.imported == 0)
    }

    /// Core imports are posted in batches of what nats.c holds for the subscription. A batch
    /// that mixes the host's own echoes with another host's events posts exactly the others,
    /// in their order. The batch is made for sure: alpha's delivery thread is held (its bus
    /// delivers `app.hold` straight to the blocking subscriber) until nats.c holds every message.
    @Test func aBatchWithEchoesAmongForeignEventsPostsOnlyTheForeignOnesInOrder() async throws {
        let busA = Bus(), busB = Bus(), busC = Bus()
        let a = try bridge("alpha", bus: busA, import: ["app.>"])
        let b = try bridge("beta", bus: busB, export: ["app.>"])
        // Another bridge under alpha's host id: what it exports comes back to alpha as echoes.
        let echo = try bridge("alpha", bus: busC, export: ["app.>"])
        defer { a.stop(); b.stop(); echo.stop() }
        let received = Collected<[Event]>([])
        let release = DispatchSemaphore(value: 0)
        let subscription = try busA.publisher(for: "app.>").sink { event in
            received.update { $0.append(event) }
            // Held until the test releases it (on every path, by the defer below): a bound here
            // would let the burst drain before a starved test task looks at it.
            if event.name == "app.hold" { release.wait() }
        }
        defer { subscription.cancel() }
        var released = false
        defer { if !released { release.signal() } }
        await warmUp(busB, received)
        #expect(await eventually { echo.statistics.state == "connected" })
        busB.post("app.hold")
        #expect(await eventually { received.value.contains { $0.name == "app.hold" } })
        let count = 40
        for index in 0..<count {
            busB.post("app.tick", fields: ["n": .int(Int64(index))])
            busC.post("app.tick", fields: ["n": .int(Int64(index))])
        }
        // Every message waits in nats.c behind the held one: they come as one burst.
        #expect(await eventually { a.statistics.importLag == UInt64(2 * count) })
        released = true
        release.signal()
        #expect(await eventually { a.statistics.echoesDropped == UInt64(count) && received.value.filter { $0.name == "app.tick" }.count == count })
        try await Task.sleep(for: .milliseconds(300))
        let ticks = received.value.filter { $0.name == "app.tick" }
        #expect(ticks.count == count)
        #expect(ticks.allSatisfy { $0.origin?.host == "beta" })
        #expect(ticks.map { $0["n"]?.intValue } == (0..<count).map { Int64($0) })
        #expect(a.statistics.echoesDropped == UInt64(count))
        #expect(a.statistics.importLag == 0)
    }

    @Test func twoOverlappingImportPatternsPostAnEventOnce() async throws {
        let busA = Bus(), busB = Bus()
        let a = try bridge("alpha", bus: busA, export: [">"])
        let b = try bridge("beta", bus: busB, import: ["app.>", "app.deploy.*", "*.deploy.done"])
        defer { a.stop(); b.stop() }
        let (received, subscription) = try collect(busB, ">")
        defer { subscription.cancel() }
        #expect(await eventually { a.statistics.state == "connected" && b.statistics.state == "connected" })
        try await Task.sleep(for: .milliseconds(100))
        busA.post("app.deploy.done")
        busA.post("app.other")
        busA.post("web.deploy.done")
        busA.post("web.other")
        #expect(await eventually { received.value.count == 3 })
        try await Task.sleep(for: .milliseconds(300))
        #expect(received.value.map(\.name).sorted() == ["app.deploy.done", "app.other", "web.deploy.done"])
    }

    @Test func anEventNATSCannotCarryIsAnnouncedNotSilentlyLost() async throws {
        let bus = Bus()
        let a = try bridge("alpha", bus: bus, export: [">"])
        defer { a.stop() }
        let (gaps, subscription) = try collect(bus, "bridge.gap")
        defer { subscription.cancel() }
        bus.post("bad name.with space")
        #expect(await eventually { !gaps.value.isEmpty })
        let gap = try #require(gaps.value.first.flatMap(BridgeGap.init))
        #expect(gap.kind == .publishFailed)
        #expect(gap.dropped == 1)
        #expect(gap.subjects == ["bad name.with space"])
        #expect(gap.host == "alpha")
    }

    @Test func exportsBeyondTheBufferWhileNATSIsAwayAreCountedAndAnnounced() async throws {
        let bus = Bus()
        var config = BridgeConfig(servers: ["nats://127.0.0.1:\(try freeLoopbackPort())"], host: "alpha")
        config.export = [try EventPattern("app.>")]
        config.exportBuffer = 20
        config.durable = BridgeConfig.Durable()  // durable: exports wait for NATS instead of going out
        let bridge = NATSBridge(config: config, bus: bus, stateDirectory: directory.at("state-alpha"), logger: Logger(label: "alpha"))
        try bridge.start()  // nobody listens there: the bridge keeps trying in the background
        defer { bridge.stop(timeout: .milliseconds(100)) }
        let (gaps, subscription) = try collect(bus, "bridge.gap")
        defer { subscription.cancel() }
        for n in 1...50 { bus.post("app.tick", fields: ["n": .int(Int64(n))]) }
        #expect(await eventually { gaps.value.compactMap(BridgeGap.init).reduce(0) { $0 + ($1.dropped ?? 0) } == 30 })
        let gap = try #require(gaps.value.first.flatMap(BridgeGap.init))
        #expect(gap.kind == .exportOverflow)
        #expect(gap.subjects == ["app.tick"])
        #expect(gap.from <= gap.until)
        #expect(bridge.statistics.state != "connected")
        #expect(bridge.statistics.exportQueued == 20)
        #expect(bridge.statistics.lost == 30)
    }
}
