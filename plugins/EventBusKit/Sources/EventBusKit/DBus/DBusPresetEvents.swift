/// How a preset's signals become its events (``DBusPreset`` documents them): one row per
/// signal, matched on interface and member, making the event's name and fields from the
/// signal's flattened arguments. The host runs it on its D-Bus thread for each signal a preset
/// watch matched; a signal no row takes posts nothing.
public enum DBusPresetEvents {
    struct Row: Sendable {
        let preset: DBusPreset
        let interface: String
        let member: String
        /// The event's name and fields, or nil when the signal is not one of the preset's
        /// events (a `PrepareForSleep` without its bool, a `PropertiesChanged` without `Connectivity`).
        let event: @Sendable (DBusSignal) -> (name: String, fields: [String: FieldValue])?
    }

    static let rows: [Row] = [
        Row(preset: .sleep, interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep") { signal in
            guard let sleeping = signal.arguments["arg0"]?.boolValue else { return nil }
            return (sleeping ? "system.sleep" : "system.resume", [:])
        },
        Row(preset: .sessions, interface: "org.freedesktop.login1.Manager", member: "SessionNew") { session("session.new", $0) },
        Row(preset: .sessions, interface: "org.freedesktop.login1.Manager", member: "SessionRemoved") { session("session.removed", $0) },
        Row(preset: .sessionLock, interface: "org.freedesktop.login1.Session", member: "Lock") { sessionObject("session.lock", $0) },
        Row(preset: .sessionLock, interface: "org.freedesktop.login1.Session", member: "Unlock") { sessionObject("session.unlock", $0) },
        Row(preset: .network, interface: "org.freedesktop.NetworkManager", member: "StateChanged") { signal in
            guard let code = signal.arguments["arg0"]?.intValue else { return nil }
            return ("network.connectivity", ["kind": "state", "state": .string(networkStates[code] ?? "unknown"), "code": .int(code)])
        },
        Row(preset: .network, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged") { signal in
            guard signal.arguments["arg0"]?.stringValue == "org.freedesktop.NetworkManager",
                  let code = signal.arguments["arg1.Connectivity"]?.intValue else { return nil }
            return ("network.connectivity", ["kind": "connectivity", "state": .string(connectivityStates[code] ?? "unknown"), "code": .int(code)])
        },
    ]

    /// `preset`'s event for `signal`, from source `source`; nil when no row of the preset takes it.
    public static func event(of preset: DBusPreset, for signal: DBusSignal, source: String,
                             monotonicNanoseconds: UInt64 = MonotonicClock.now()) -> Event? {
        guard let row = rows.first(where: { $0.preset == preset && $0.member == signal.member && $0.interface == signal.interface }),
              let (name, fields) = row.event(signal) else { return nil }
        return Event(name: name, source: source, fields: fields, monotonicNanoseconds: monotonicNanoseconds)
    }

    /// `SessionNew`/`SessionRemoved(so)`: the session's id and object path.
    private static func session(_ name: String, _ signal: DBusSignal) -> (name: String, fields: [String: FieldValue])? {
        guard let id = signal.arguments["arg0"]?.stringValue, let path = signal.arguments["arg1"]?.stringValue else { return nil }
        return (name, ["id": .string(id), "path": .string(path)])
    }

    /// `Lock`/`Unlock` carry nothing: the session is the object that sent it, its id the last
    /// element of the path, escaped as logind escapes it (`_32` for a leading `2`).
    private static func sessionObject(_ name: String, _ signal: DBusSignal) -> (name: String, fields: [String: FieldValue])? {
        let prefix = "/org/freedesktop/login1/session/"
        guard signal.path.hasPrefix(prefix), let id = DBusLabel.unescaped(String(signal.path.dropFirst(prefix.count))) else { return nil }
        return (name, ["id": .string(id), "path": .string(signal.path)])
    }

    /// NetworkManager's `NMState`.
    static let networkStates: [Int64: String] = [
        0: "unknown", 10: "asleep", 20: "disconnected", 30: "disconnecting", 40: "connecting",
        50: "connected_local", 60: "connected_site", 70: "connected_global",
    ]

    /// NetworkManager's `NMConnectivityState`.
    static let connectivityStates: [Int64: String] = [0: "unknown", 1: "none", 2: "portal", 3: "limited", 4: "full"]
}
