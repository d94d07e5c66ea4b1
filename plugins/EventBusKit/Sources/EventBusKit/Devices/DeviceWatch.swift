/// Which device events a `devices` source delivers: the options of the shared `devices` source
/// kind.
///
/// Equal watches share one netlink monitor (one socket, one thread) in the host; the
/// ``description`` is part of the source id, so it is canonical.
public struct DeviceWatch: SourceOptions {
    public static let kind = "devices"

    /// Only devices of this subsystem (`net`, `block`, `usb`…); nil: every subsystem.
    public var subsystem: String?
    /// Only devices of this type within ``subsystem`` (`disk`, `partition`, `usb_device`…).
    public var devtype: String?
    /// Only devices udev's rules tagged so (`systemd`, `seat`…). Tags exist only after udev's
    /// rules ran, so a tag filter needs the udev layer.
    public var tag: String?
    /// Which layer's messages to follow.
    public var layer: DeviceLayerChoice

    public init(subsystem: String? = nil, devtype: String? = nil, tag: String? = nil,
                layer: DeviceLayerChoice = .automatic) {
        self.subsystem = subsystem
        self.devtype = devtype
        self.tag = tag
        self.layer = layer
    }

    /// `subsystem=net devtype=- tag=- layer=automatic`: the part of the source id after `devices:`.
    public var description: String {
        "subsystem=\(subsystem ?? "*") devtype=\(devtype ?? "*") tag=\(tag ?? "*") layer=\(layer.rawValue)"
    }

    /// Throws ``EventBusError/Code/invalidDeviceWatch`` for what libsystemd would refuse or what
    /// can never match: a devtype without a subsystem, an empty or malformed name, a tag on the
    /// kernel layer (the kernel tags nothing).
    public func validate() throws {
        for (what, value) in [("subsystem", subsystem), ("devtype", devtype), ("tag", tag)] {
            guard let value else { continue }
            guard Self.isValidName(value) else {
                throw EventBusError(.invalidDeviceWatch,
                    "\(what) \"\(value)\" is not a device \(what) name (letters, digits, '_', '-', '.', ':', at most 64)")
            }
        }
        if devtype != nil && subsystem == nil {
            throw EventBusError(.invalidDeviceWatch, "a devtype filter needs a subsystem (libsystemd matches them as a pair)")
        }
        if tag != nil && layer == .kernel {
            throw EventBusError(.invalidDeviceWatch, "a tag filter needs the udev layer: tags are set by udev's rules, never by the kernel")
        }
    }

    /// Subsystem, devtype and tag names as sysfs and udev spell them; nothing that could be read
    /// as a separator in the source id.
    static func isValidName(_ name: String) -> Bool {
        guard !name.isEmpty, name.utf8.count <= 64 else { return false }
        return name.utf8.allSatisfy { byte in
            (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                || byte == 0x5F || byte == 0x2D || byte == 0x2E || byte == 0x3A
        }
    }
}

/// Which messages a device watch follows.
///
/// The kernel multicasts a *uevent* for every device change; udevd, where it runs, handles each
/// one (rules, device nodes' links, tags, its database) and multicasts it again, on another
/// netlink group. Subscribers of the udev layer see devices ready to use; subscribers of the
/// kernel layer see them earlier and without udev's properties.
public enum DeviceLayerChoice: String, Sendable, Hashable, CaseIterable {
    /// udev's messages where udevd runs (its control socket `/run/udev/control` exists when the
    /// source starts), the kernel's otherwise.
    case automatic
    /// udev's messages only (nothing arrives while udevd does not run).
    case udev
    /// The kernel's uevents.
    case kernel
}

/// The layer a device event came from: its `from` field.
public enum DeviceLayer: String, Sendable, Hashable {
    /// Sent by udevd after its rules ran: the device is initialized.
    case udev
    /// Sent by the kernel; udev (if it runs) has not handled it yet.
    case kernel
}

extension Bus {
    /// `device.*` events of the devices `subsystem`/`devtype`/`tag` select, with `devices.*`
    /// notices of the same watch (see ``DeviceChange`` and ``DeviceNotice``). A subscriber first
    /// gets what exists (`origin` snapshot, then `devices.snapshot`), then changes as they happen.
    /// Subscriptions with equal options share one netlink monitor; it opens with the first
    /// subscriber and closes after the last cancels.
    ///
    /// Throws ``EventBusError/Code/invalidDeviceWatch`` for malformed options and
    /// ``EventBusError/Code/sourceUnavailable`` on a bus without the host's devices driver.
    public func devices(subsystem: String? = nil, devtype: String? = nil, tag: String? = nil,
                        layer: DeviceLayerChoice = .automatic) throws -> EventPublisher {
        try devices(DeviceWatch(subsystem: subsystem, devtype: devtype, tag: tag, layer: layer))
    }

    /// Like ``devices(subsystem:devtype:tag:layer:)``, with the options as one value.
    public func devices(_ watch: DeviceWatch) throws -> EventPublisher {
        try watch.validate()
        return try publisher(for: DeviceWatch.allEvents, from: watch)
    }
}

extension DeviceWatch {
    /// Every event a devices source posts: `device.*` changes and `devices.*` notices.
    static let allEvents = [try! EventPattern("device.*"), try! EventPattern("devices.*")]
}
