import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
@testable import ModuleIsolation
import Testing

/// Stands in for a running devices source, which greets a joiner from its own thread at once:
/// this one calls `whileJoining` from the joining thread itself, so a test can pin the moment.
final class ImmediateGreeter: GreetsJoiningSubscribers, @unchecked Sendable {
    let id: String
    let whileJoining: @Sendable (SubscriberGreeting, _ source: String) -> Void

    init(id: String, whileJoining: @escaping @Sendable (SubscriberGreeting, _ source: String) -> Void) {
        self.id = id
        self.whileJoining = whileJoining
    }

    func start(posting bus: Bus) {}
    func stop() {}
    func subscriberJoined(_ greeting: SubscriberGreeting) { whileJoining(greeting, id) }
}

/// ``ModuleForwarding`` without a worker process: what it keeps for a worker that is starting.
@Suite struct ModuleForwardingTests {
    /// A worker subscribes while it activates its module, so the host's subscription is made
    /// while batches are parked — and a running source's greeting can end a batch before
    /// ``ModuleForwarding/subscribe(worker:id:spec:)`` has listed the subscription's relay. A
    /// worker's module in CI missed its `devices.status` and snapshot that way (1 run in 4).
    /// Here that batch ends inside the subscribe every time.
    @Test func aGreetingWhoseBatchEndsWhileTheSubscriptionIsMadeIsKeptForTheWorker() throws {
        let hostBus = Bus()
        // The mailbox runs on `pool`, suspended until the greeting is in: the one batch it then
        // takes holds the subscription's demand and the whole greeting.
        let pool = DispatchQueue(label: "forwarding-test.pool")
        pool.suspend()
        let greet: @Sendable (SubscriberGreeting, String) -> Void = { greeting, source in
            greeting.post(contentsOf: [Event(name: "devices.status", source: source),
                                       Event(name: "device.added", source: source),
                                       Event(name: "devices.snapshot", source: source)])
            pool.resume()
            pool.sync {}  // after the mailbox's run: its batch ended and was parked
        }
        hostBus.registerSource(DeviceWatch.self) { _, id in ImmediateGreeter(id: id, whileJoining: greet) }
        let running = try hostBus.devices(subsystem: "net").sink { _ in }  // the first subscriber, not greeted
        defer { running.cancel() }

        let forwarding = ModuleForwarding(mailbox: Mailbox(label: "forwarding-test", pool: pool), hostBus: hostBus,
                                          log: ModuleLog { _, _ in })
        let worker = forwarding.beginWorker()
        let request: JSON = [
            "id": .int(1),
            "patterns": ["device.*", "devices.*"],
            "source": ["kind": "devices", "options": ["layer": "automatic", "subsystem": "net"]],
        ]
        try forwarding.subscribe(worker: worker, id: 1, spec: request)

        // Kept for the worker to come; lost, and counted, once the module stops instead.
        #expect(forwarding.discardAll() == 3)
    }
}
