import CNATS
import Foundation
@testable import NATSBridge
import Testing
import TestSupport

/// The durable importer's hand-made pulls against a real nats-server with JetStream: deliveries
/// that arrive after their fetch gave up are taken first, in order, and never more than a batch
/// (nats.c 3.4.1's own fetch overflowed its array in exactly that case: docs/fleet-durability.md,
/// "Fetching"); a message larger than `max_bytes` is said so and fetched alone; `+ACK`s reach
/// the consumer; an empty consumer answers nothing.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct ConsumerPullTests {
    /// A stream `PULL` on `eventbus.>` with `count` messages `eventbus.origin.load.tick`, whose
    /// payload is the message's number, and the consumer `puller` from its first message.
    final class Fixture {
        let server: NATSServer
        let client: NATSClient
        let jetStream: OpaquePointer
        let setup: JetStreamSetup

        init(_ directory: TemporaryDirectory, count: Int, ackWait: Duration = .seconds(30)) throws {
            server = try NATSServer(storage: directory.path)
            client = try NATSClient(config: BridgeConfig(servers: [server.url], host: "test"), name: "pull test",
                                    events: NATSClient.Events(disconnected: {}, reconnected: {}, closed: {}, error: { _, _ in }))
            var context: OpaquePointer?
            try #require(natsConnection_JetStream(&context, client.connection, nil) == NATS_OK)
            jetStream = context!
            var durable = BridgeConfig.Durable()
            durable.stream = "PULL"
            durable.ackWait = ackWait
            setup = JetStreamSetup(jetStream: jetStream, durable: durable, subjects: Subjects(prefix: "eventbus", host: "test"),
                                   consumer: "puller")
            try setup.ensureStream()
            if count > 0 { try publish(1...count) }
            try setup.placeConsumer(name: "puller", startSequence: 1, filter: "eventbus.>")
        }

        /// Publishes and waits until the stream stored them all.
        func publish(_ numbers: ClosedRange<Int>, padding: Int = 0) throws {
            for n in numbers {
                let payload = String(n) + String(repeating: " ", count: padding)
                try #require(natsConnection_PublishString(client.connection, "eventbus.origin.load.tick", payload) == NATS_OK)
            }
            try #require(natsConnection_Flush(client.connection) == NATS_OK)
            try #require(awaitCondition { (try? self.setup.ensureStream().last) == UInt64(numbers.upperBound) })
        }

        func pull() throws -> ConsumerPull {
            try ConsumerPull(connection: client.connection, stream: "PULL", consumer: "puller", domain: nil)
        }

        /// What a pull fetched, as the numbers in the payloads; destroys the messages.
        func numbers(_ outcome: ConsumerPull.Outcome, acknowledgingWith pull: ConsumerPull? = nil) -> [Int]? {
            guard case .messages(let messages) = outcome else { return nil }
            defer { messages.forEach { natsMsg_Destroy($0) } }
            if let pull { messages.forEach(pull.acknowledge) }
            return messages.map { message in
                let text = String(cString: natsMsg_GetData(message)).trimmingCharacters(in: .whitespaces)
                return Int(text) ?? -1
            }
        }

        /// How many deliveries wait in `pull`'s subscription.
        func pending(_ pull: ConsumerPull) -> Int {
            var messages: Int32 = 0, bytes: Int32 = 0
            return natsSubscription_GetPending(pull.subscription, &messages, &bytes) == NATS_OK ? Int(messages) : -1
        }

        /// The consumer's acknowledgements still outstanding.
        func ackPending() -> Int {
            var info: UnsafeMutablePointer<jsConsumerInfo>?
            var code = jsErrCode(0)
            guard js_GetConsumerInfo(&info, jetStream, "PULL", "puller", nil, &code) == NATS_OK, let info else { return -1 }
            defer { jsConsumerInfo_Destroy(info) }
            return Int(info.pointee.NumAckPending)
        }

        deinit {
            jsCtx_Destroy(jetStream)
            client.close()
        }
    }

    /// A pull request the importer no longer waits for: its deliveries arrive later.
    private func abandonedRequest(_ fixture: Fixture, _ pull: ConsumerPull, batch: Int) throws {
        let body = "{\"batch\":\(batch),\"no_wait\":true}"
        try #require(natsConnection_PublishRequestString(fixture.client.connection, "$JS.API.CONSUMER.MSG.NEXT.PULL.puller",
                                                         pull.inbox, body) == NATS_OK)
    }

    @Test func lateDeliveriesComeFirstInOrderAndNeverMoreThanABatch() throws {
        let directory = try TemporaryDirectory("consumer-pull")
        let fixture = try Fixture(directory, count: 700)
        let pull = try fixture.pull()
        // 200 late deliveries waiting: more than half a batch of 256, the case nats.c 3.4.1
        // overflowed in. They are the batch, alone: no request is added on top of them.
        try abandonedRequest(fixture, pull, batch: 200)
        try #require(awaitCondition { fixture.pending(pull) >= 200 })
        #expect(fixture.numbers(pull.fetch(batch: 256, maxBytes: 0, wait: .milliseconds(250)), acknowledgingWith: pull)
                == Array(1...200))
        // Two abandoned requests' worth (400 waiting): a batch at a time, in order.
        try abandonedRequest(fixture, pull, batch: 200)
        try abandonedRequest(fixture, pull, batch: 200)
        try #require(awaitCondition { fixture.pending(pull) >= 400 })
        #expect(fixture.numbers(pull.fetch(batch: 256, maxBytes: 0, wait: .milliseconds(250)), acknowledgingWith: pull)
                == Array(201...456))
        #expect(fixture.numbers(pull.fetch(batch: 256, maxBytes: 0, wait: .milliseconds(250)), acknowledgingWith: pull)
                == Array(457...600))
        // Nothing waiting: a request of its own.
        var rest: [Int] = []
        while rest.count < 100, let numbers = fixture.numbers(pull.fetch(batch: 256, maxBytes: 0, wait: .seconds(2)), acknowledgingWith: pull) {
            rest += numbers
        }
        #expect(rest == Array(601...700))
        #expect(awaitCondition { fixture.ackPending() == 0 }, "the +ACKs reached the consumer")
        // The consumer has nothing more: no_wait answers that.
        guard case .nothing = pull.fetch(batch: 256, maxBytes: 0, wait: .seconds(2)) else {
            Issue.record("an empty consumer answered messages")
            return
        }
    }

    @Test func aMessageLargerThanTheBatchBytesIsFetchedAlone() throws {
        let directory = try TemporaryDirectory("consumer-pull-large")
        let fixture = try Fixture(directory, count: 0)
        try fixture.publish(1...1, padding: 5_000)
        try fixture.publish(2...3)
        let pull = try fixture.pull()
        var outcome = pull.fetch(batch: 256, maxBytes: 1_000, wait: .seconds(2))
        guard case .tooLarge = outcome else {
            Issue.record("expected the server's 409 for a message over max_bytes, got \(outcome)")
            return
        }
        outcome = pull.fetch(batch: 1, maxBytes: 0, wait: .seconds(2))
        #expect(fixture.numbers(outcome, acknowledgingWith: pull) == [1])
        outcome = pull.fetch(batch: 256, maxBytes: 1_000, wait: .seconds(2))
        #expect(fixture.numbers(outcome, acknowledgingWith: pull) == [2, 3])
    }
}

/// Polls `condition` every 10 ms for up to 30 s.
private func awaitCondition(_ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(30)
    while Date() < deadline {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}
