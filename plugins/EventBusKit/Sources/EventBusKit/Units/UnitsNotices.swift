/// A notice that a units source could not see for a while: the connection to the manager broke
/// (systemd re-executed, dbus-daemon restarted, the socket closed) or could not be made.
/// Transitions in that time are not announced one by one; the source reconnects, lists the
/// units again and posts each difference as a `unit.state` with origin `resync`, then a
/// `units.synced`. Posted as a `units.gap` event, before those.
public struct UnitsGap: Sendable, Hashable {
    public static let eventName = "units.gap"

    /// Why, for people ("the connection to systemd closed", "systemd re-executed").
    public var reason: String

    public init(reason: String) {
        self.reason = reason
    }

    public func event(source: String) -> Event {
        Event(name: Self.eventName, source: source, fields: ["reason": .string(reason)])
    }
}

/// The end of a snapshot or a resync, as a `units.synced` event: from here on the source
/// announces every transition as it happens.
///
/// After a snapshot it follows the `unit.state` events with origin `snapshot` (one per matching
/// unit); after a `units.gap` it follows the `unit.state` events with origin `resync` (one per
/// matching unit that changed while the source was blind).
public struct UnitsSynced: Sendable, Hashable {
    public static let eventName = "units.synced"

    public enum Kind: String, Sendable, Hashable {
        /// The current state of every matching unit was posted (a watch started, or a subscriber joined it).
        case snapshot
        /// The differences after a blind period were posted.
        case resync
    }

    public var kind: Kind
    /// How many matching units the manager has loaded now.
    public var units: Int
    /// For a resync: how many of them differed (each had a `unit.state` with origin `resync`).
    public var changedUnits: Int

    public init(kind: Kind, units: Int, changedUnits: Int) {
        self.kind = kind
        self.units = units
        self.changedUnits = changedUnits
    }

    public func event(source: String) -> Event {
        Event(name: Self.eventName, source: source,
              fields: ["kind": .string(kind.rawValue), "units": .int(Int64(units)), "changed_units": .int(Int64(changedUnits))])
    }
}

extension Event {
    /// The units gap notice this event carries, if it is one.
    public var unitsGap: UnitsGap? {
        guard name == UnitsGap.eventName, let reason = fields["reason"]?.stringValue else { return nil }
        return UnitsGap(reason: reason)
    }

    /// The end-of-sync notice this event carries, if it is one.
    public var unitsSynced: UnitsSynced? {
        guard name == UnitsSynced.eventName, let kind = fields["kind"]?.stringValue.flatMap(UnitsSynced.Kind.init(rawValue:)),
              let units = fields["units"]?.intValue, let changed = fields["changed_units"]?.intValue else { return nil }
        return UnitsSynced(kind: kind, units: Int(units), changedUnits: Int(changed))
    }
}
