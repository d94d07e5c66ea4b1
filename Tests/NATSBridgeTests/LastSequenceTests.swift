import CNATS
import Foundation
@testable import NATSBridge
import Testing
import TestSupport

/// What the durable importer asks the stream's leader when its consumer delivers nothing
/// (`JetStreamSetup.lastSequence(matching:)`), against the real nats-server: the last message
/// matching a wildcard filter, not the stream's last, and 0 when nothing matches.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct LastSequenceTests {
    @Test func theLeaderNamesTheLastMessageMatchingTheFilter() throws {
        let directory = try TemporaryDirectory("last-sequence")
        let fixture = try ConsumerPullTests.Fixture(directory, count: 5)  // eventbus.origin.load.tick, 1…5
        #expect(fixture.setup.lastSequence(matching: "eventbus.*.load.>") == 5)
        #expect(fixture.setup.lastSequence(matching: "eventbus.*.deploy.>") == 0)
        // A later message of another name moves the stream's end, not the filter's last.
        try #require(natsConnection_PublishString(fixture.client.connection, "eventbus.origin.deploy.done", "x") == NATS_OK)
        try #require(natsConnection_Flush(fixture.client.connection) == NATS_OK)
        let stored = Date().addingTimeInterval(30)
        while (try? fixture.setup.ensureStream().last) != 6, Date() < stored { usleep(10_000) }
        #expect(fixture.setup.lastSequence(matching: "eventbus.*.load.>") == 5)
        #expect(fixture.setup.lastSequence(matching: "eventbus.*.deploy.>") == 6)
        #expect(fixture.setup.lastSequence(matching: "eventbus.>") == 6)
    }
}
