import EventBusKit
import Synchronization

/// The shared source behind every subscription to one ``DBusWatch``: an attachment to its
/// bus's ``DBusConnection``, which does the work on its thread (`eventbus.dbus`) and posts
/// here. `start` and `stop` run on whatever thread subscribes or cancels.
final class DBusSource: EventSource, @unchecked Sendable {
    let id: String
    let watch: DBusWatch
    private let driver: DBusDriver
    /// Set while running: where it posts, and the connection it is attached to.
    private let running = Mutex<(bus: Bus, connection: DBusConnection)?>(nil)

    init(id: String, watch: DBusWatch, driver: DBusDriver) {
        self.id = id
        self.watch = watch
        self.driver = driver
    }

    func start(posting bus: Bus) {
        let connection = driver.connections.acquire(watch.bus, for: id)
        running.withLock { $0 = (bus, connection) }
        connection.attach(self)
    }

    func stop() {
        guard let connection = running.withLock({ running in
            defer { running = nil }
            return running?.connection
        }) else { return }
        connection.detach(self)
        driver.connections.release(watch.bus, for: id)
    }

    /// On the connection's thread. Nothing once stopped.
    func post(_ events: [Event]) {
        guard let bus = running.withLock({ $0?.bus }) else { return }
        bus.post(contentsOf: events)
    }
}
