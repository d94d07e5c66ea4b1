import Foundation

/// A `dbus.gap` event: a D-Bus watch could not see its bus for a while — the connection closed,
/// the bus daemon restarted, or the bus could not be reached when the watch started — and is
/// back. Signals sent in that time are lost: D-Bus keeps nothing for a client that is not
/// connected.
///
/// Posted once the connection is back and before any signal received after it, so it stands in
/// the stream where the hole is: everything before it arrived before the loss, everything after
/// it after the reconnection. While the bus stays away the source's status (`eventbus status`)
/// says so, and why.
public struct DBusGap: Sendable, Hashable {
    public static let eventName = "dbus.gap"

    /// The bus, as ``DBusBus/description`` spells it (`system`, `user`, `address:unix:path=…`).
    public var bus: String
    /// Why, for people ("the connection to the system bus closed", "cannot connect to …").
    public var reason: String
    /// When the watch went blind (or started blind).
    public var lostAt: Date
    /// How long it was blind.
    public var downSeconds: Double

    public init(bus: String, reason: String, lostAt: Date, downSeconds: Double) {
        self.bus = bus
        self.reason = reason
        self.lostAt = lostAt
        self.downSeconds = downSeconds
    }

    public func event(source: String) -> Event {
        Event(name: Self.eventName, source: source, fields: [
            "bus": .string(bus), "reason": .string(reason), "lost_at": .date(lostAt), "down_seconds": .double(downSeconds),
        ])
    }
}

extension Event {
    /// The D-Bus gap notice this event carries, if it is one.
    public var dbusGap: DBusGap? {
        guard name == DBusGap.eventName, let bus = fields["bus"]?.stringValue, let reason = fields["reason"]?.stringValue,
              let lostAt = fields["lost_at"]?.dateValue, let down = fields["down_seconds"]?.doubleValue else { return nil }
        return DBusGap(bus: bus, reason: reason, lostAt: lostAt, downSeconds: down)
    }
}
