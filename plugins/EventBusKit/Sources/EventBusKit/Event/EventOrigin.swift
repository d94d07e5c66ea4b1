/// Where an event imported from another host came from: that host's id, its bus sequence number
/// there, and the instance (one run of that host's bridge) that exported it.
///
/// Imported events are ordinary events on the local bus — a local ``Event/sequence``, the same
/// name and fields, the origin's wall-clock time — so modules subscribe to them with the same
/// patterns as to local ones. The origin rides in three reserved fields (`@origin.host`,
/// `@origin.seq`, `@origin.instance`) rather than a new stored property: the event value, the
/// control protocol and every module built against interface version 2 stay as they are, and
/// `eventbus tail` shows the origin like any field. Local events have no origin (`nil`).
///
/// A bridge never exports an event that has an origin: that is what keeps bridged hosts from
/// forwarding each other's events in a loop.
public struct EventOrigin: Sendable, Hashable, CustomStringConvertible {
    public static let hostField = "@origin.host"
    public static let sequenceField = "@origin.seq"
    public static let instanceField = "@origin.instance"

    /// The exporting host's id (`bridge.nats.host`, by default its hostname).
    public var host: String
    /// The event's bus sequence number on that host. It starts over when the host restarts;
    /// (``instance``, ``sequence``) is what identifies an event of that host for good.
    public var sequence: UInt64
    /// Which run of the origin host's bridge exported it: larger for later runs.
    public var instance: UInt64

    public init(host: String, sequence: UInt64, instance: UInt64) {
        self.host = host
        self.sequence = sequence
        self.instance = instance
    }

    public var description: String { "\(host)#\(sequence)" }

    /// The reserved fields that carry this origin, to merge into an imported event's fields.
    public var fields: [String: FieldValue] {
        [Self.hostField: .string(host), Self.sequenceField: .int(Int64(bitPattern: sequence)),
         Self.instanceField: .int(Int64(bitPattern: instance))]
    }
}

extension Event {
    /// The origin of an event imported from another host through a bridge; nil for local events.
    public var origin: EventOrigin? {
        guard let host = fields[EventOrigin.hostField]?.stringValue,
              let sequence = fields[EventOrigin.sequenceField]?.intValue
        else { return nil }
        let instance = fields[EventOrigin.instanceField]?.intValue ?? 0
        return EventOrigin(host: host, sequence: UInt64(bitPattern: sequence), instance: UInt64(bitPattern: instance))
    }
}
