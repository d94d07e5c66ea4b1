import EventBusKit
import Synchronization

/// The shared source behind every subscription to one ``UnitWatch``: an attachment to its
/// manager's ``UnitsConnection``, which does the work on its thread and posts here.
final class UnitsSource: GreetsJoiningSubscribers, @unchecked Sendable {
    let id: String
    let watch: UnitWatch
    private let driver: UnitsDriver
    /// Set while running: where it posts, and the connection it is attached to.
    private let running = Mutex<(bus: Bus, connection: UnitsConnection)?>(nil)

    init(id: String, watch: UnitWatch, driver: UnitsDriver) {
        self.id = id
        self.watch = watch
        self.driver = driver
    }

    func start(posting bus: Bus) {
        let connection = driver.acquire(watch.manager, for: id)
        running.withLock { $0 = (bus, connection) }
        connection.attach(self)
    }

    func stop() {
        guard let connection = running.withLock({ running in
            defer { running = nil }
            return running?.connection
        }) else { return }
        connection.detach(self)
        driver.release(watch.manager, for: id)
    }

    /// Every subscriber first gets the state of the units it follows: a joining one gets a
    /// snapshot of its own, in order with the changes (``UnitsSynced``). Before `start` has
    /// attached the source, there is nothing to ask: the first snapshot, to every subscriber,
    /// is still to come.
    func subscriberJoined(_ greeting: SubscriberGreeting) {
        running.withLock { $0?.connection }?.requestSnapshot(for: self, greeting: greeting)
    }

    /// On the connection's thread. Nothing once stopped.
    func post(_ events: [Event]) {
        guard let bus = running.withLock({ $0?.bus }) else { return }
        bus.post(contentsOf: events)
    }
}
