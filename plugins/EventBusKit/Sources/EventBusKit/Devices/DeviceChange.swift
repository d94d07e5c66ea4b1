/// A device that appeared, went away or changed, as module code reads it from a `device.*`
/// event.
///
/// Apply them in order and a subscriber's picture of the devices stays true: each device is
/// reported `added` once and `removed` once, whether the source saw it happen, found it when it
/// started (``Origin/snapshot``) or found the difference after messages were lost
/// (``Origin/rescan``).
public struct DeviceChange: Sendable, Hashable {
    /// What happened; the kernel's actions (`ACTION=`), by their event names.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// `device.added`: it exists (appeared, or found by a snapshot or a rescan).
        case added
        /// `device.removed`: it is gone.
        case removed
        /// `device.changed`: something about it changed (a medium, a link state, a `udevadm trigger`).
        case changed
        /// `device.moved`: renamed; ``DeviceChange/oldSyspath`` says where it was.
        case moved
        /// `device.bound`: a driver took it (``DeviceChange/driver``).
        case bound
        /// `device.unbound`: its driver let go of it.
        case unbound
        /// `device.online`: a CPU or memory block was brought online.
        case online
        /// `device.offline`: … taken offline.
        case offline

        /// `device.added`, `device.removed`…
        public var eventName: String { "device.\(rawValue)" }

        /// The kind of the kernel's `ACTION` word (`add`, `remove`, `change`, `move`, `bind`,
        /// `unbind`, `online`, `offline`).
        public init?(action: String) {
            switch action {
            case "add": self = .added
            case "remove": self = .removed
            case "change": self = .changed
            case "move": self = .moved
            case "bind": self = .bound
            case "unbind": self = .unbound
            case "online": self = .online
            case "offline": self = .offline
            default: return nil
            }
        }

        /// The kind whose event name is `name`, if any.
        public init?(eventName name: String) {
            guard name.hasPrefix("device.") else { return nil }
            self.init(rawValue: String(name.dropFirst("device.".count)))
        }
    }

    /// How the source learned of it.
    public enum Origin: String, Sendable, Hashable {
        /// A message from the kernel or udev, as it happened.
        case event
        /// Found by listing the devices when the subscription began (before `devices.snapshot`).
        case snapshot
        /// Found by listing the devices again after messages were lost (after a `devices.gap`).
        case rescan
    }

    public var kind: Kind
    /// The device's path in sysfs (`/sys/devices/virtual/net/veth0`): what identifies it.
    public var syspath: String
    /// For `moved`: its syspath before.
    public var oldSyspath: String?
    public var subsystem: String?
    public var devtype: String?
    /// Its node in /dev (`/dev/loop7`), if it has one.
    public var devnode: String?
    /// The last part of the syspath (`veth0`, `loop7`).
    public var sysname: String?
    /// The driver bound to it, if any.
    public var driver: String?
    /// The `ACTION` word of the message (`add`, `remove`…); nil for snapshot and rescan.
    public var action: String?
    /// The kernel's uevent sequence number (`SEQNUM`), for messages; nil for snapshot and rescan.
    public var seqnum: UInt64?
    /// For network interfaces: the interface index.
    public var ifindex: Int?
    /// Which layer reported it.
    public var layer: DeviceLayer
    public var origin: Origin
    /// Every property of the device (`ID_*`, `DEVNAME`, `INTERFACE`, `MAJOR`…), as the kernel and
    /// udev spell them; as event fields they are `prop.NAME`.
    public var properties: [String: String]

    public init(kind: Kind, syspath: String, oldSyspath: String? = nil, subsystem: String? = nil,
                devtype: String? = nil, devnode: String? = nil, sysname: String? = nil, driver: String? = nil,
                action: String? = nil, seqnum: UInt64? = nil, ifindex: Int? = nil, layer: DeviceLayer,
                origin: Origin = .event, properties: [String: String] = [:]) {
        self.kind = kind
        self.syspath = syspath
        self.oldSyspath = oldSyspath
        self.subsystem = subsystem
        self.devtype = devtype
        self.devnode = devnode
        self.sysname = sysname
        self.driver = driver
        self.action = action
        self.seqnum = seqnum
        self.ifindex = ifindex
        self.layer = layer
        self.origin = origin
        self.properties = properties
    }

    /// The prefix of property fields.
    public static let propertyPrefix = "prop."

    /// The event's fields: what is known is written, absent values are left out.
    public var fields: [String: FieldValue] {
        var fields = [String: FieldValue](minimumCapacity: 8 + properties.count)
        fields["syspath"] = .string(syspath)
        fields["from"] = .string(layer.rawValue)
        fields["origin"] = .string(origin.rawValue)
        if let oldSyspath { fields["old_syspath"] = .string(oldSyspath) }
        if let subsystem { fields["subsystem"] = .string(subsystem) }
        if let devtype { fields["devtype"] = .string(devtype) }
        if let devnode { fields["devnode"] = .string(devnode) }
        if let sysname { fields["sysname"] = .string(sysname) }
        if let driver { fields["driver"] = .string(driver) }
        if let action { fields["action"] = .string(action) }
        if let seqnum { fields["seqnum"] = .int(Int64(clamping: seqnum)) }
        if let ifindex { fields["ifindex"] = .int(Int64(ifindex)) }
        for (name, value) in properties { fields[Self.propertyPrefix + name] = .string(value) }
        return fields
    }

    /// The `device.*` event of this change, posted by `source`.
    public func event(source: String) -> Event {
        Event(name: kind.eventName, source: source, fields: fields)
    }
}

extension Event {
    /// The device change this event carries, if it is one.
    public var device: DeviceChange? {
        guard let kind = DeviceChange.Kind(eventName: name), let syspath = fields["syspath"]?.stringValue,
              let layer = fields["from"]?.stringValue.flatMap(DeviceLayer.init(rawValue:))
        else { return nil }
        var properties: [String: String] = [:]
        for (key, value) in fields where key.hasPrefix(DeviceChange.propertyPrefix) {
            if let text = value.stringValue { properties[String(key.dropFirst(DeviceChange.propertyPrefix.count))] = text }
        }
        return DeviceChange(
            kind: kind, syspath: syspath, oldSyspath: fields["old_syspath"]?.stringValue,
            subsystem: fields["subsystem"]?.stringValue, devtype: fields["devtype"]?.stringValue,
            devnode: fields["devnode"]?.stringValue, sysname: fields["sysname"]?.stringValue,
            driver: fields["driver"]?.stringValue, action: fields["action"]?.stringValue,
            seqnum: fields["seqnum"]?.intValue.map { UInt64(clamping: $0) },
            ifindex: fields["ifindex"]?.intValue.map { Int(clamping: $0) }, layer: layer,
            origin: fields["origin"]?.stringValue.flatMap(DeviceChange.Origin.init(rawValue:)) ?? .event,
            properties: properties)
    }
}
