import EventBusKit
import Synchronization

/// The host's implementation of the `units` source kind (``UnitWatch``): one
/// ``UnitsSource`` per distinct watch, and one ``UnitsConnection`` per manager, opened with the
/// first watch of that manager and closed after its last one stops.
///
/// ```swift
/// UnitsDriver.register(on: bus)
/// ```
public final class UnitsDriver: Sendable {
    private let connections = Mutex<[UnitManager: (connection: UnitsConnection, sources: Int)]>([:])

    private init() {}

    /// Registers the `units` source kind on `bus`.
    @discardableResult
    public static func register(on bus: Bus) -> UnitsDriver {
        let driver = UnitsDriver()
        bus.registerSource(kind: UnitWatch.kind) { options, id in
            // The bus calls a driver only with options of its kind.
            UnitsSource(id: id, watch: options as! UnitWatch, driver: driver)
        }
        return driver
    }

    /// How many managers have a connection open (for tests and status).
    public var openConnections: Int { connections.withLock { $0.count } }

    func acquire(_ manager: UnitManager) -> UnitsConnection {
        connections.withLock { connections in
            if var entry = connections[manager] {
                entry.sources += 1
                connections[manager] = entry
                return entry.connection
            }
            let connection = UnitsConnection(manager: manager)
            connections[manager] = (connection, 1)
            return connection
        }
    }

    func release(_ manager: UnitManager) {
        let closing: UnitsConnection? = connections.withLock { connections in
            guard var entry = connections[manager] else { return nil }
            entry.sources -= 1
            if entry.sources > 0 {
                connections[manager] = entry
                return nil
            }
            connections[manager] = nil
            return entry.connection
        }
        closing?.stop()
    }
}
