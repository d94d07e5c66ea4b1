import CSystemd
import EventBusKit

/// Reads what the devices source reports out of libsystemd's `sd_device` objects (from a monitor's
/// message or an enumeration), on the thread that owns them.
enum SDDevice {
    /// Properties that describe the message rather than the device: they are typed fields of
    /// the event (``DeviceChange/action``, ``DeviceChange/seqnum``), and a device listed by an
    /// enumeration has none, so leaving them out keeps snapshot and event properties alike.
    private static let messageProperties: Set<String> = ["ACTION", "SEQNUM"]

    /// The change `device` describes: of `kind` (from its action for a message; `added` for a
    /// listed device), with every property.
    static func change(of device: OpaquePointer, kind: DeviceChange.Kind, layer: DeviceLayer,
                       origin: DeviceChange.Origin) -> DeviceChange? {
        guard let syspath = string(device, sd_device_get_syspath) else { return nil }
        var properties: [String: String] = [:]
        var value: UnsafePointer<CChar>?
        var key = sd_device_get_property_first(device, &value)
        while let name = key {
            let text = String(cString: name)
            if !messageProperties.contains(text), let value { properties[text] = String(cString: value) }
            key = sd_device_get_property_next(device, &value)
        }
        var change = DeviceChange(kind: kind, syspath: syspath, layer: layer, origin: origin, properties: properties)
        change.subsystem = string(device, sd_device_get_subsystem)
        change.devtype = string(device, sd_device_get_devtype)
        change.devnode = string(device, sd_device_get_devname)
        change.sysname = string(device, sd_device_get_sysname)
        change.driver = string(device, sd_device_get_driver)
        if origin == .event {
            change.action = properties["ACTION"] ?? actionWord(kind)
            var seqnum: UInt64 = 0
            if sd_device_get_seqnum(device, &seqnum) >= 0 { change.seqnum = seqnum }
            if kind == .moved, let old = properties["DEVPATH_OLD"] { change.oldSyspath = "/sys" + old }
        }
        var ifindex: Int32 = 0
        if sd_device_get_ifindex(device, &ifindex) >= 0 { change.ifindex = Int(ifindex) }
        return change
    }

    /// The kind of a monitor message's action; nil for an action this libsystemd does not know.
    static func kind(of device: OpaquePointer) -> DeviceChange.Kind? {
        var action = sd_device_action_t(rawValue: 0)
        guard sd_device_get_action(device, &action) >= 0 else { return nil }
        switch action {
        case SD_DEVICE_ADD: return .added
        case SD_DEVICE_REMOVE: return .removed
        case SD_DEVICE_CHANGE: return .changed
        case SD_DEVICE_MOVE: return .moved
        case SD_DEVICE_ONLINE: return .online
        case SD_DEVICE_OFFLINE: return .offline
        case SD_DEVICE_BIND: return .bound
        case SD_DEVICE_UNBIND: return .unbound
        default: return nil
        }
    }

    private static func actionWord(_ kind: DeviceChange.Kind) -> String {
        switch kind {
        case .added: "add"
        case .removed: "remove"
        case .changed: "change"
        case .moved: "move"
        case .bound: "bind"
        case .unbound: "unbind"
        case .online: "online"
        case .offline: "offline"
        }
    }

    private static func string(_ device: OpaquePointer,
                               _ get: (OpaquePointer?, UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32) -> String? {
        var value: UnsafePointer<CChar>?
        guard get(device, &value) >= 0, let value else { return nil }
        return String(cString: value)
    }
}
