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
    /// Per manager: its connection and the ids of the sources attached to it.
    private let connections = Mutex<[UnitManager: (connection: UnitsConnection, sources: [String])]>([:])

    private init() {}

    /// Registers the `units` source kind on `bus`.
    @discardableResult
    public static func register(on bus: Bus) -> UnitsDriver {
        let driver = UnitsDriver()
        bus.registerSource(UnitWatch.self) { options, id in
            // The bus calls a driver only with options of its kind.
            UnitsSource(id: id, watch: options as! UnitWatch, driver: driver)
        }
        return driver
    }

    /// How many managers have a connection open (for tests and status).
    public var openConnections: Int { connections.withLock { $0.count } }

    /// Each running units source's state, by source id, as `eventbus status` shows it: its
    /// manager's connection following, or unavailable and why (no systemd to follow, say).
    public var sourceStates: [String: String] {
        let entries = connections.withLock { Array($0.values) }
        var states: [String: String] = [:]
        for entry in entries {
            let state = entry.connection.state
            for id in entry.sources { states[id] = state }
        }
        return states
    }

    func acquire(_ manager: UnitManager, for source: String) -> UnitsConnection {
        connections.withLock { connections in
            if var entry = connections[manager] {
                entry.sources.append(source)
                connections[manager] = entry
                return entry.connection
            }
            let connection = UnitsConnection(manager: manager)
            connections[manager] = (connection, [source])
            return connection
        }
    }

    func release(_ manager: UnitManager, for source: String) {
        let closing: UnitsConnection? = connections.withLock { connections in
            guard var entry = connections[manager] else { return nil }
            if let index = entry.sources.firstIndex(of: source) { entry.sources.remove(at: index) }
            if !entry.sources.isEmpty {
                connections[manager] = entry
                return nil
            }
            connections[manager] = nil
            return entry.connection
        }
        closing?.stop()
    }
}
