import EventBusKit

/// The host's implementation of the `units` source kind (``UnitWatch``): one
/// ``UnitsSource`` per distinct watch, and one ``UnitsConnection`` per manager, opened with the
/// first watch of that manager and closed after its last one stops.
///
/// ```swift
/// UnitsDriver.register(on: bus)
/// ```
public final class UnitsDriver: Sendable {
    /// One connection per manager, shared by the sources of that manager.
    let connections = SharedConnections<UnitManager, UnitsConnection> { UnitsConnection(manager: $0) }

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
    public var openConnections: Int { connections.count }

    /// Each running units source's state, by source id, as `eventbus status` shows it: its
    /// manager's connection following, or unavailable and why (no systemd to follow, say).
    public var sourceStates: [String: String] {
        let entries = connections.attached
        var states: [String: String] = [:]
        for entry in entries {
            let state = entry.connection.state
            for id in entry.sources { states[id] = state }
        }
        return states
    }
}
