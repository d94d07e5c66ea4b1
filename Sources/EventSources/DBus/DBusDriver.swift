import EventBusKit
import Synchronization

/// The host's implementation of the `dbus` source kind (``DBusWatch``): one ``DBusSource`` per
/// distinct watch, and one ``DBusConnection`` (one socket, one thread) per bus, opened with the
/// first watch of that bus and closed after its last one stops.
///
/// ```swift
/// let dbus = DBusDriver.register(on: bus)
/// dbus.sourceStates  // ["dbus:bus=system preset=sleep": "following system bus"]
/// ```
public final class DBusDriver: Sendable {
    /// Per bus: its connection and the ids of the sources attached to it.
    private let connections = Mutex<[DBusBus: (connection: DBusConnection, sources: [String])]>([:])

    private init() {}

    /// Registers the `dbus` source kind on `bus`.
    @discardableResult
    public static func register(on bus: Bus) -> DBusDriver {
        let driver = DBusDriver()
        bus.registerSource(DBusWatch.self) { options, id in
            // The bus calls a driver only with options of its kind.
            DBusSource(id: id, watch: options as! DBusWatch, driver: driver)
        }
        return driver
    }

    /// How many buses have a connection open (for tests and status).
    public var openConnections: Int { connections.withLock { $0.count } }

    /// Each running D-Bus source's state, by source id, as `eventbus status` shows it:
    /// `following system bus` (`user bus`, `bus at ADDRESS`), `connecting to …`, or
    /// `unavailable: why` — the bus is away (and when the next try is), or it refused the
    /// source's match rule.
    public var sourceStates: [String: String] {
        let entries = connections.withLock { Array($0.values) }
        var states: [String: String] = [:]
        for entry in entries {
            let state = entry.connection.state
            for id in entry.sources { states[id] = entry.connection.refusal(of: id) ?? state }
        }
        return states
    }

    func acquire(_ bus: DBusBus, for source: String) -> DBusConnection {
        connections.withLock { connections in
            if var entry = connections[bus] {
                entry.sources.append(source)
                connections[bus] = entry
                return entry.connection
            }
            let connection = DBusConnection(bus: bus)
            connections[bus] = (connection, [source])
            return connection
        }
    }

    func release(_ bus: DBusBus, for source: String) {
        let closing: DBusConnection? = connections.withLock { connections in
            guard var entry = connections[bus] else { return nil }
            if let index = entry.sources.firstIndex(of: source) { entry.sources.remove(at: index) }
            if !entry.sources.isEmpty {
                connections[bus] = entry
                return nil
            }
            connections[bus] = nil
            return entry.connection
        }
        closing?.stop()
    }
}
