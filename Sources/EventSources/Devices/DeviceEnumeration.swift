import CSystemd
import EventBusKit
import Glibc

/// Lists the devices a watch selects, from sysfs (and udev's database on the udev layer), with
/// `sd_device_enumerator`: what a snapshot and a rescan report. Runs on the monitor's thread.
enum DeviceEnumeration {
    struct Failure: Error {
        let errorNumber: Int32
        let message: String
    }

    /// On the udev layer only devices udev has initialized are listed (libsystemd's default:
    /// those are the ones its messages announce); on the kernel layer every device is.
    static func list(_ watch: DeviceWatch, layer: DeviceLayer, origin: DeviceChange.Origin) throws(Failure) -> [DeviceChange] {
        var enumerator: OpaquePointer?
        var result = sd_device_enumerator_new(&enumerator)
        guard result >= 0, let enumerator else { throw Failure(errorNumber: -result, message: "cannot list devices: \(text(result))") }
        defer { sd_device_enumerator_unref(enumerator) }
        if let subsystem = watch.subsystem {
            result = sd_device_enumerator_add_match_subsystem(enumerator, subsystem, 1)
            guard result >= 0 else { throw Failure(errorNumber: -result, message: "cannot match subsystem \(subsystem): \(text(result))") }
        }
        if let tag = watch.tag {
            result = sd_device_enumerator_add_match_tag(enumerator, tag)
            guard result >= 0 else { throw Failure(errorNumber: -result, message: "cannot match tag \(tag): \(text(result))") }
        }
        if layer == .kernel { sd_device_enumerator_allow_uninitialized(enumerator) }
        var devices: [DeviceChange] = []
        var device = sd_device_enumerator_get_device_first(enumerator)
        while let current = device {
            if let change = SDDevice.change(of: current, kind: .added, layer: layer, origin: origin),
               watch.devtype == nil || change.devtype == watch.devtype {
                devices.append(change)
            }
            device = sd_device_enumerator_get_device_next(enumerator)
        }
        return devices
    }

    static func text(_ result: Int32) -> String { String(cString: strerror(-result)) }
}
