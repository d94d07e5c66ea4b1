import EventBusKit
import EventFieldCoding
import Foundation
import Glibc
@testable import NATSBridge
import Testing
import TestSupport

/// A peer flooding the core subjects — valid events, oversized ones, subjects and payloads that
/// are not events, as fast as the socket takes them — costs only itself: the events of another
/// origin sent among the flood all arrive, and what the flood loses is counted against its own
/// host name (`over_share`), or as `malformed`.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct BridgeFairShareTests {
    @Test func aFloodingOriginLosesItsOwnExcessAndNoOtherOriginsEvents() async throws {
        let directory = try TemporaryDirectory("bridge-fair-share")
        let server = try NATSServer(storage: directory.path)
        let bus = Bus()
        var config = BridgeConfig(servers: [server.url], host: "beta")
        config.import = [try EventPattern("app.>")]
        config.pendingLimit = 2_000
        config.pendingBytes = 4 << 20
        let bridge = try startBridge(config, bus, directory)
        defer { bridge.stop() }
        // Each flood event costs this host 100 µs on the bus's delivery loop — nats.c's delivery
        // thread while it posts: the flood arrives far faster than it is taken in.
        let (received, subscription) = try collect(bus, "app.>") { event in
            if event.name == "app.flood" { usleep(100) }
        }
        defer { subscription.cancel() }
        let (gapEvents, gapSubscription) = try collect(bus, "bridge.gap")
        defer { gapSubscription.cancel() }

        func payload(_ fields: [String: FieldValue], instance: UInt64, number: UInt64) -> [UInt8] {
            var writer = FieldWriter()
            WireFormat.encode(Event(name: "unused", source: "remote", fields: fields), instance: instance, number: number, into: &writer)
            return writer.bytes
        }
        let publisher = try RawNATSPublisher(port: server.port)
        #expect(await eventually {
            try? publisher.publish(Array("eventbus.alpha.app.warm".utf8), payload([:], instance: 7, number: 0))
            return received.value.contains { $0.name == "app.warm" }
        })

        let large = String(repeating: "x", count: 100_000)
        var messages: [(subject: [UInt8], payload: [UInt8])] = []
        var floodNumber: UInt64 = 0, legitNumber: UInt64 = 0, badSubjects = 0
        for i in 0..<20_000 {
            switch i % 10 {
            case 5:
                messages.append((Array("eventbus.evil.app.bad".utf8) + [0x1B] + Array("[2J".utf8), [1, 2, 3]))
                badSubjects += 1
            case 7:
                messages.append((Array("eventbus.evil.app.flood".utf8), [0xDE, 0xAD]))
            default:
                floodNumber += 1
                let fields: [String: FieldValue] = i % 50 == 0 ? ["pad": .string(large)] : ["i": .int(Int64(i))]
                messages.append((Array("eventbus.evil.app.flood".utf8), payload(fields, instance: 9, number: floodNumber)))
            }
            if i % 40 == 39 {
                legitNumber += 1
                messages.append((Array("eventbus.alpha.app.legit".utf8),
                                 payload(["n": .int(Int64(legitNumber))], instance: 7, number: legitNumber)))
            }
        }
        let floodOnItsSubject = 20_000 - badSubjects
        let malformedBefore = bridge.statistics.malformed
        try publisher.publish(messages)

        func legit() -> [Int64] { received.value.filter { $0.name == "app.legit" }.compactMap { $0["n"]?.intValue } }
        func flood() -> Int { received.value.count { $0.name == "app.flood" } }
        func overShare(_ origin: String) -> UInt64 { bridge.statistics.overShare[origin] ?? 0 }
        func refusedPayloads() -> Int { Int(bridge.statistics.malformed - malformedBefore) - badSubjects }
        #expect(await eventually { flood() + Int(overShare("evil")) + refusedPayloads() == floodOnItsSubject },
                "flood: \(flood()) posted, \(overShare("evil")) over its share, \(refusedPayloads()) refused of \(floodOnItsSubject); \(bridge.statistics)")
        #expect(await eventually { legit().count == Int(legitNumber) }, "alpha: \(legit().count) of \(legitNumber) arrived; \(bridge.statistics)")
        #expect(legit() == Array(1...Int64(legitNumber)), "alpha's events, all and in its order")
        #expect(overShare("evil") > 0, "the flood was taken in as fast as it came: nothing was over its share")
        #expect(overShare("alpha") == 0 && bridge.statistics.missed == 0, "\(bridge.statistics)")
        #expect(Int(bridge.statistics.malformed - malformedBefore) >= badSubjects)

        // Announced against the flooder, with its name, exactly; never against alpha.
        func announced(_ origin: String) -> Int {
            gapEvents.value.compactMap(BridgeGap.init).filter { $0.kind == .overShare && $0.origin == origin }.reduce(0) { $0 + ($1.dropped ?? 0) }
        }
        #expect(await eventually { announced("evil") == Int(overShare("evil")) }, "announced \(announced("evil"))")
        #expect(announced("alpha") == 0)
        let slowConsumer = gapEvents.value.compactMap(BridgeGap.init).filter { $0.kind == .slowConsumer }.reduce(0) { $0 + ($1.dropped ?? 0) }
        print("flood of 20 000 (\(badSubjects) bad subjects) with \(legitNumber) events of alpha: alpha \(legit().count) arrived; evil \(flood()) posted, \(overShare("evil")) over its share, \(refusedPayloads()) payloads refused; nats.c dropped \(slowConsumer)")
    }
}
