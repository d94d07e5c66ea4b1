import EventBusKit

/// What a device watch has told its subscribers exists, and the rules that keep it true: every
/// device is reported `added` once and `removed` once, whether a message, a listing or both saw
/// it. Owned by the monitor's thread; pure (no OS calls), so it is tested on its own.
///
/// Why rules rather than sequence numbers: the monitor's socket is open before a listing starts,
/// so messages queued meanwhile may describe changes the listing already shows. The kernel
/// sends a device's `remove` before its sysfs folder goes, so a listing can show a device whose
/// `remove` came earlier — sequence numbers cannot say which queued message a listing reflects;
/// the device's state can:
/// - `add` of a device already reported: the listing saw it; suppressed.
/// - `remove` of a device never reported: the listing missed it (gone before it looked);
///   suppressed. Otherwise reported, and forgotten.
/// - `move`: reported when the old path was known (the new one replaces it), suppressed when only
///   the new one is (the listing saw it there), reported and remembered when neither is.
/// - `change`, `bind`, `unbind`, `online`, `offline`: always reported; remembered only for a
///   known device (a queued change of a device a rescan reported removed must not bring it back).
struct DeviceTracker {
    private(set) var known: [String: DeviceChange] = [:]

    /// The change to post for `message` (origin event), or nil when it would report twice.
    mutating func apply(_ message: DeviceChange) -> DeviceChange? {
        switch message.kind {
        case .added:
            guard known[message.syspath] == nil else { return nil }
            known[message.syspath] = message
            return message
        case .removed:
            guard known.removeValue(forKey: message.syspath) != nil else { return nil }
            return message
        case .moved:
            if let old = message.oldSyspath, known.removeValue(forKey: old) != nil {
                known[message.syspath] = message
                return message
            }
            guard known[message.syspath] == nil else { return nil }
            known[message.syspath] = message
            return message
        case .changed, .bound, .unbound, .online, .offline:
            if var device = known[message.syspath] {
                device.properties = message.properties
                device.driver = message.kind == .unbound ? nil : message.driver ?? device.driver
                device.devnode = message.devnode ?? device.devnode
                known[message.syspath] = device
            }
            return message
        }
    }

    /// Replaces what is known with `listing` (a first listing: nothing was known) and returns it
    /// in the order to post: by syspath, so a parent comes before its children.
    mutating func start(with listing: [DeviceChange]) -> [DeviceChange] {
        known = Dictionary(listing.map { ($0.syspath, $0) }, uniquingKeysWith: { _, last in last })
        return current(as: .snapshot)
    }

    /// Every known device as an `added` change of `origin`, by syspath: what a subscriber who
    /// joins now is told.
    func current(as origin: DeviceChange.Origin) -> [DeviceChange] {
        known.values.sorted { $0.syspath < $1.syspath }.map { device in
            var device = device
            device.kind = .added
            device.origin = origin
            device.action = nil
            device.seqnum = nil
            device.oldSyspath = nil
            return device
        }
    }

    /// The difference between what is known and `listing` (taken after messages were lost), as
    /// changes with origin rescan: removals first, children before parents, then additions,
    /// parents before children. `listing` becomes what is known.
    mutating func resync(with listing: [DeviceChange]) -> (removed: [DeviceChange], added: [DeviceChange]) {
        let now = Dictionary(listing.map { ($0.syspath, $0) }, uniquingKeysWith: { _, last in last })
        let removed = known.values.filter { now[$0.syspath] == nil }.sorted { $0.syspath > $1.syspath }.map { device in
            var device = device
            device.kind = .removed
            device.origin = .rescan
            device.action = nil
            device.seqnum = nil
            device.oldSyspath = nil
            return device
        }
        let added = now.values.filter { known[$0.syspath] == nil }.sorted { $0.syspath < $1.syspath }.map { device in
            var device = device
            device.kind = .added
            device.origin = .rescan
            return device
        }
        known = now
        return (removed, added)
    }
}
