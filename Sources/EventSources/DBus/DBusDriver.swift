import EventBusKit

/// The host's implementation of the `dbus` source kind (``DBusWatch``): one ``DBusSource`` per
/// distinct watch, and one ``DBusConnection`` (one socket, one thread) per bus, opened with the
/// first watch of that bus and closed after its last one stops.
///
/// ```swift
/// let dbus = DBusDriver.register(on: bus)
/// dbus.sourceStates  // ["dbus:bus=system preset=sleep": "following system bus"]
/// ```
public final class DBusDriver: Sendable {
    /// One connection per bus, shared by the sources of that bus.
    let connections = SharedConnections<DBusBus, DBusConnection> { DBusConnection(bus: $0) }

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
    public var openConnections: Int { connections.count }

    /// Each running D-Bus source's state, by source id, as `eventbus status` shows it:
    /// `following system bus` (`user bus`, `bus at ADDRESS`), `connecting to …`, or
    /// `unavailable: why` — the bus is away (and when the next try is), or it refused the
    /// source's match rule.
    public var sourceStates: [String: String] {
        let entries = connections.attached
        var states: [String: String] = [:]
        for entry in entries {
            let state = entry.connection.state
            for id in entry.sources { states[id] = entry.connection.refusal(of: id) ?? state }
        }
        return states
    }
}
