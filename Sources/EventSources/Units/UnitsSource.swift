import EventBusKit
import Synchronization

/// The shared source behind every subscription to one ``UnitWatch``: an attachment to its
/// manager's ``UnitsConnection``, which does the work on its thread and posts here.
final class UnitsSource: GreetsJoiningSubscribers, @unchecked Sendable {
    let id: String
    let watch: UnitWatch
    private let driver: UnitsDriver

    private struct State {
        /// Set while running: where it posts, and the connection it is attached to.
        var running: (bus: Bus, connection: UnitsConnection)?
        /// Joiners whose greeting came before `start` attached the source: asked for with it.
        var waiting: [SubscriberGreeting] = []
    }
    private let state = Mutex(State())

    init(id: String, watch: UnitWatch, driver: UnitsDriver) {
        self.id = id
        self.watch = watch
        self.driver = driver
    }

    /// Attaches, then asks for the snapshots of who joined before — under the lock a joiner
    /// takes too, so the connection gets every snapshot request after the attachment it needs.
    func start(posting bus: Bus) {
        let connection = driver.connections.acquire(watch.manager, for: id)
        state.withLock { state in
            state.running = (bus, connection)
            connection.attach(self)
            for greeting in state.waiting { connection.requestSnapshot(for: self, greeting: greeting) }
            state.waiting = []
        }
    }

    func stop() {
        guard let connection = state.withLock({ state in
            defer { state = State() }
            return state.running?.connection
        }) else { return }
        connection.detach(self)
        driver.connections.release(watch.manager, for: id)
    }

    /// Every subscriber first gets the state of the units it follows: the one that started the
    /// source with the first snapshot, a joining one with a snapshot of its own, in order with
    /// the changes (``UnitsSynced``) — also one that joins before `start` has attached the
    /// source (the bus keeps the first snapshot, posted to everyone, from it).
    func subscriberJoined(_ greeting: SubscriberGreeting) {
        state.withLock { state in
            if let connection = state.running?.connection {
                connection.requestSnapshot(for: self, greeting: greeting)
            } else {
                state.waiting.append(greeting)
            }
        }
    }

    /// On the connection's thread. Nothing once stopped.
    func post(_ events: [Event]) {
        guard let bus = state.withLock({ $0.running?.bus }) else { return }
        bus.post(contentsOf: events)
    }
}
