/// Named D-Bus watches for signals most hosts care about, each posting events of its own
/// instead of `dbus.signal` (the mapping is ``DBusPresetEvents``). Each takes its signals from
/// the service's own bus name only (a well-known `sender`): on the system bus anybody may send
/// a signal named `PrepareForSleep`, but only logind owns `org.freedesktop.login1`.
///
/// | preset | signals | events and their fields |
/// |---|---|---|
/// | `sleep` | logind `Manager.PrepareForSleep(b)` | `system.sleep` (true: about to suspend or hibernate), `system.resume` (false: back); no fields |
/// | `sessions` | logind `Manager.SessionNew(so)`, `SessionRemoved(so)` | `session.new`, `session.removed`: `id` (`2`, `c1`), `path` (its object path) |
/// | `session-lock` | logind `Session.Lock()`, `Unlock()` on `/org/freedesktop/login1/session/…` | `session.lock`, `session.unlock`: `id` (from the object path), `path` |
/// | `network` | NetworkManager `StateChanged(u)`, and `PropertiesChanged` of its `Connectivity` | `network.connectivity`: `kind` (`state` or `connectivity`), `state` (named: `connected_global`…, `full`…), `code` (NetworkManager's number) |
///
/// Other signals the preset's match lets through (logind's `UserNew`, NetworkManager's
/// `DeviceAdded`…) are not events of the preset: it posts only the events above, and `dbus.gap`.
public enum DBusPreset: String, Sendable, Hashable, CaseIterable, Codable {
    case sleep
    case sessions
    case sessionLock = "session-lock"
    case network

    /// The bus its service is on: the system bus, for all of them.
    public var bus: DBusBus { .system }

    /// The signals it takes.
    public var match: DBusMatch {
        switch self {
        case .sleep:
            DBusMatch(sender: "org.freedesktop.login1", path: "/org/freedesktop/login1",
                      interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep")
        case .sessions:
            DBusMatch(sender: "org.freedesktop.login1", path: "/org/freedesktop/login1", interface: "org.freedesktop.login1.Manager")
        case .sessionLock:
            DBusMatch(sender: "org.freedesktop.login1", pathNamespace: "/org/freedesktop/login1/session",
                      interface: "org.freedesktop.login1.Session")
        case .network:
            DBusMatch(sender: "org.freedesktop.NetworkManager", path: "/org/freedesktop/NetworkManager")
        }
    }

    /// The names of the events it posts (besides `dbus.gap`).
    public var eventNames: [String] {
        switch self {
        case .sleep: ["system.sleep", "system.resume"]
        case .sessions: ["session.new", "session.removed"]
        case .sessionLock: ["session.lock", "session.unlock"]
        case .network: ["network.connectivity"]
        }
    }

    /// The preset of this name (`sleep`, `sessions`, `session-lock`, `network`). Throws
    /// ``EventBusError/Code/invalidDBusWatch`` naming the presets for any other.
    public init(named name: String) throws {
        guard let preset = DBusPreset(rawValue: name) else {
            throw EventBusError(.invalidDBusWatch,
                "no D-Bus preset \"\(name)\" (presets: \(DBusPreset.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        self = preset
    }
}
