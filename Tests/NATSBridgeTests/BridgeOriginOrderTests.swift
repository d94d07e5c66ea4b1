import EventBusKit
import EventFieldCoding
import Foundation
@testable import NATSBridge
import Testing
import TestSupport

/// A durable import posts each origin's events in the order the origin published them, also when
/// the stream stored some ahead of earlier ones (a cluster's stream leader dying with publishes
/// it never stored, which the origin publishes again behind later ones): the later ones are held
/// until the earlier come. Here a raw NATS client stores an origin's payloads in the stream out of
/// order, as that leaves them, for a real bridge on a real nats-server to import.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct BridgeOriginOrderTests {
    private static let instance: UInt64 = 9

    /// The payload of `alpha`'s export number `sequence`, naming `sequence - 1` as the one before.
    private func payload(_ sequence: UInt64) -> [UInt8] {
        let event = Event(name: "unused", source: "alpha-source", fields: ["n": .int(Int64(sequence))])
        var writer = FieldWriter()
        WireFormat.encode(event, instance: Self.instance, previous: sequence - 1, into: &writer)
        // The bus numbers an event when it is posted; this one was not: its sequence is written
        // in place (after the version byte and the instance).
        var bytes = writer.bytes
        withUnsafeBytes(of: sequence.littleEndian) { bytes.replaceSubrange(9..<17, with: $0) }
        return bytes
    }

    private func config(_ server: NATSServer) throws -> BridgeConfig {
        var config = BridgeConfig(servers: [server.url], host: "beta")
        config.import = [try EventPattern(">")]
        config.durable = BridgeConfig.Durable()
        config.durable?.startAtBeginning = true
        config.durable?.holdPatience = .seconds(3_600)  // the hold ends when 9 comes, not by time
        return config
    }

    /// The origin sequences of alpha's events `received` holds.
    private func sequences(_ received: Collected<[Event]>) -> [UInt64] {
        received.value.compactMap { $0.origin?.host == "alpha" ? $0.origin?.sequence : nil }
    }

    @Test func eventsStoredAheadOfEarlierOnesArePostedInTheirOriginsOrderAcrossARestart() async throws {
        let directory = try TemporaryDirectory("bridge-origin-order")
        let server = try NATSServer(storage: directory.path)
        let subject = Array("eventbus.alpha.app.step".utf8)
        let publisher = try RawNATSPublisher(port: server.port)

        var bus = Bus()
        var bridge = try startBridge(try config(server), bus, directory)
        var (received, subscription) = try collect(bus, "app.>")
        // Once the bridge made its stream, what is published is stored (copies of 1 are dropped).
        #expect(await eventually {
            try? publisher.publish(subject, payload(1))
            return sequences(received) == [1]
        })
        // 2, then 5 6 stored ahead of 3 4 (published again after a lost acknowledgement), then 7.
        for sequence: UInt64 in [2, 5, 6, 3, 4, 7] { try publisher.publish(subject, payload(sequence)) }
        #expect(await eventually { sequences(received).count == 7 }, "\(sequences(received))")
        #expect(sequences(received) == Array(1...7))
        #expect(bridge.statistics.reordered == 2)
        #expect(bridge.statistics.outOfOrder == 0)

        // 8, then 10 held (9 not stored yet) when the host stops: its position stays before 10.
        for sequence: UInt64 in [8, 10] { try publisher.publish(subject, payload(sequence)) }
        #expect(await eventually { sequences(received).last == 8 })
        try await Task.sleep(for: .milliseconds(500))  // 10 fetched and held meanwhile
        #expect(sequences(received).last == 8)
        bridge.stop()
        subscription.cancel()
        let position = try String(contentsOfFile: directory.at("state-beta/bridge-EVENTBUS-eventbus-beta.position"), encoding: .utf8)
        #expect(position.contains("origin alpha \(Self.instance) 8\n"), "\(position)")

        // The next run fetches 10 again and holds it until 9 comes.
        bus = Bus()
        bridge = try startBridge(try config(server), bus, directory)
        defer { bridge.stop() }
        (received, subscription) = try collect(bus, "app.>")
        defer { subscription.cancel() }
        try await Task.sleep(for: .milliseconds(500))
        #expect(sequences(received).isEmpty)
        try publisher.publish(subject, payload(9))
        #expect(await eventually { sequences(received) == [9, 10] }, "\(sequences(received))")
    }
}
