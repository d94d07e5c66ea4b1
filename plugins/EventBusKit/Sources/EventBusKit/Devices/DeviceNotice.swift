/// A notice about a device watch itself, as a `devices.*` event: when a subscriber's picture is
/// complete, when it may have gone stale, and when it is whole again.
public struct DeviceNotice: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// `devices.snapshot`: every device that existed when the subscriber joined has been
        /// reported (`device.added` with origin snapshot); changes follow. Each subscriber gets
        /// one snapshot, its own (a late joiner's goes to it alone).
        case snapshot
        /// `devices.gap`: the kernel dropped messages for this watch's socket (its receive
        /// buffer was full); ``DeviceNotice/dropped`` says how many. A rescan follows.
        case gap
        /// `devices.rescanned`: the devices were listed again after a gap and the difference
        /// reported (`device.added`/`removed` with origin rescan); the picture is whole again.
        case rescanned
        /// `devices.error`: the watch cannot do what was asked; ``DeviceNotice/message`` says what.
        case error
        /// `devices.status`: which layer the watch follows; the first event a subscriber gets.
        case status

        public var eventName: String { "devices.\(rawValue)" }

        public init?(eventName name: String) {
            guard name.hasPrefix("devices.") else { return nil }
            self.init(rawValue: String(name.dropFirst("devices.".count)))
        }
    }

    public var kind: Kind
    /// For people: what happened and what to do.
    public var message: String
    /// The layer the watch follows (nil before it runs, or when it failed to start).
    public var layer: DeviceLayer?
    /// For `snapshot`: how many devices it reported.
    public var devices: Int?
    /// For `gap`: how many netlink messages the kernel dropped (of any device: the drop happens
    /// before filtering).
    public var dropped: Int?
    /// For `rescanned`: how many devices were reported added and removed.
    public var added: Int?
    public var removed: Int?
    /// For `error`: the `errno` behind it.
    public var errorNumber: Int32?

    public init(kind: Kind, message: String, layer: DeviceLayer? = nil, devices: Int? = nil, dropped: Int? = nil,
                added: Int? = nil, removed: Int? = nil, errorNumber: Int32? = nil) {
        self.kind = kind
        self.message = message
        self.layer = layer
        self.devices = devices
        self.dropped = dropped
        self.added = added
        self.removed = removed
        self.errorNumber = errorNumber
    }

    public func event(source: String) -> Event {
        var fields: [String: FieldValue] = ["message": .string(message)]
        if let layer { fields["from"] = .string(layer.rawValue) }
        if let devices { fields["devices"] = .int(Int64(devices)) }
        if let dropped { fields["dropped"] = .int(Int64(dropped)) }
        if let added { fields["added"] = .int(Int64(added)) }
        if let removed { fields["removed"] = .int(Int64(removed)) }
        if let errorNumber { fields["errno"] = .int(Int64(errorNumber)) }
        return Event(name: kind.eventName, source: source, fields: fields)
    }
}

extension Event {
    /// The device-watch notice this event carries, if it is one.
    public var deviceNotice: DeviceNotice? {
        guard let kind = DeviceNotice.Kind(eventName: name), let message = fields["message"]?.stringValue else { return nil }
        func int(_ key: String) -> Int? { fields[key]?.intValue.map { Int(clamping: $0) } }
        return DeviceNotice(kind: kind, message: message,
                            layer: fields["from"]?.stringValue.flatMap(DeviceLayer.init(rawValue:)),
                            devices: int("devices"), dropped: int("dropped"), added: int("added"),
                            removed: int("removed"), errorNumber: fields["errno"]?.intValue.map { Int32(truncatingIfNeeded: $0) })
    }
}
