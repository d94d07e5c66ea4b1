import CNATS
import Foundation
@testable import NATSBridge
import Testing
import TestSupport

/// The backstop for consumers nobody deletes — one whose delete was sent to a dying server, or
/// that of a host SIGKILLed — is the server's `inactive_threshold` on every consumer the bridge
/// makes (docs/fleet-durability.md, "Resume"). Checked against the real nats-server (Debian 12's 2.9.10),
/// with thresholds of seconds instead of the bridge's 2 min: a consumer nobody pulls from is
/// removed; one pulled from as the importer does — `no_wait` requests that find nothing on an
/// idle stream, the next one soon after — is kept, and removed once the pulls stop.
///
/// No timing is asserted beyond "eventually gone" (within a generous deadline) and "still there
/// while pulled from" (a pull every ~100 ms against a 4 s threshold: only a stall of this
/// process or the server of 4 s would remove it).
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct ConsumerInactivityTests {
    /// A stream `IDLE` on `eventbus.>` holding nothing, and a setup whose consumers have
    /// `threshold`.
    final class Fixture {
        let server: NATSServer
        let client: NATSClient
        let jetStream: OpaquePointer
        let setup: JetStreamSetup

        init(_ directory: TemporaryDirectory, threshold: Duration) throws {
            server = try NATSServer(storage: directory.path)
            client = try NATSClient(config: BridgeConfig(servers: [server.url], host: "test"), name: "inactivity test",
                                    events: NATSClient.Events(disconnected: {}, reconnected: {}, closed: {}, error: { _, _ in }))
            var context: OpaquePointer?
            try #require(natsConnection_JetStream(&context, client.connection, nil) == NATS_OK)
            jetStream = context!
            var durable = BridgeConfig.Durable()
            durable.stream = "IDLE"
            setup = JetStreamSetup(jetStream: jetStream, durable: durable, subjects: Subjects(prefix: "eventbus", host: "test"),
                                   consumer: "idle", inactiveThreshold: threshold)
            try setup.ensureStream()
        }

        /// Whether the server has consumer `name`: nil when it gave no clear answer.
        func exists(_ name: String) -> Bool? {
            var info: UnsafeMutablePointer<jsConsumerInfo>?
            var code = jsErrCode(0)
            switch js_GetConsumerInfo(&info, jetStream, "IDLE", name, nil, &code) {
            case NATS_OK:
                jsConsumerInfo_Destroy(info)
                return true
            case NATS_NOT_FOUND:
                return false
            default:
                return nil
            }
        }

        /// The inactive threshold the server holds for consumer `name`.
        func threshold(_ name: String) -> Int64? {
            var info: UnsafeMutablePointer<jsConsumerInfo>?
            var code = jsErrCode(0)
            guard js_GetConsumerInfo(&info, jetStream, "IDLE", name, nil, &code) == NATS_OK, let info else { return nil }
            defer { jsConsumerInfo_Destroy(info) }
            return info.pointee.Config?.pointee.InactiveThreshold
        }

        deinit {
            jsCtx_Destroy(jetStream)
            client.close()
        }
    }

    @Test func aConsumerNobodyPullsFromIsRemovedAfterItsThreshold() throws {
        let directory = try TemporaryDirectory("consumer-inactive")
        let fixture = try Fixture(directory, threshold: .seconds(2))
        try fixture.setup.placeConsumer(name: "idle-1", startSequence: 1, filter: "eventbus.>")
        #expect(fixture.threshold("idle-1") == 2_000_000_000, "the server holds the threshold the bridge set")
        #expect(fixture.exists("idle-1") == true)
        #expect(eventually(within: patience) { fixture.exists("idle-1") == false },
                "a consumer nobody pulls from outlived its 2 s threshold by the suite's patience")
    }

    @Test func aConsumerInUseIsKeptAndRemovedOnceItsPullsStop() throws {
        let directory = try TemporaryDirectory("consumer-in-use")
        let threshold = Duration.seconds(4)
        let fixture = try Fixture(directory, threshold: threshold)
        try fixture.setup.placeConsumer(name: "idle-2", startSequence: 1, filter: "eventbus.>")
        let pull = try ConsumerPull(connection: fixture.client.connection, stream: "IDLE", consumer: "idle-2", domain: nil)
        // Three thresholds of pulls as the importer makes them on an idle stream: each a
        // `no_wait` request the server answers with "nothing" (or, if it held it, expiring
        // after 240 ms), the next one 100 ms later.
        let until = ContinuousClock.now + threshold * 3
        var pulls = 0
        while ContinuousClock.now < until {
            guard case .nothing = pull.fetch(batch: 256, maxBytes: 0, wait: .milliseconds(250)) else {
                Issue.record("pull \(pulls + 1) of a consumer in use did not find it (or found messages on an empty stream)")
                return
            }
            pulls += 1
            #expect(fixture.exists("idle-2") != false, "removed while pulled from, after \(pulls) pulls")
            usleep(100_000)
        }
        #expect(pulls >= 10)
        #expect(fixture.exists("idle-2") == true, "a consumer pulled from for three thresholds is still there")
        // The pulls stop: now it goes, as any other — the threshold applied to it all along.
        #expect(eventually(within: patience) { fixture.exists("idle-2") == false },
                "a consumer no longer pulled from outlived its 4 s threshold by the suite's patience")
        natsSubscription_Destroy(pull.subscription)
    }
}

/// Polls `condition` every 100 ms until it holds or `timeout` passes.
private func eventually(within timeout: Duration, _ condition: () -> Bool) -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        usleep(100_000)
    }
    return condition()
}
