import ConfigText
import EventBusKit

/// The `dbus` source kind: signals on a D-Bus bus (README.md in this folder).
public enum DBusKind: SourceKind {
    public typealias Options = DBusWatch

    public static let configSection = "dbus"
    public static let configKeys = ["bus", "match", "preset"]
    public static let tailOption = TailOption(option: "dbus", wire: .sources)
    public static let notices = [DBusGap.eventName]

    /// `{name, bus?, match: {sender?, path?, path_namespace?, interface?, member?, arg0…}}` or
    /// `{name, bus?, preset}`.
    public static func options(from fields: [String: ConfigNode], of entry: ConfigNode,
                               directory: String) throws(ConfigError) -> DBusWatch {
        var bus: DBusBus?
        if let busNode = fields["bus"] {
            do {
                bus = try DBusBus(parsing: try busNode.string())
            } catch {
                throw busNode.error(describing: error)
            }
        }
        switch (fields["match"], fields["preset"]) {
        case (let matchNode?, nil):
            return try checked(DBusWatch(bus: bus ?? .system, match: try match(matchNode)), at: matchNode)
        case (nil, let presetNode?):
            let name = try presetNode.string()
            do {
                return try checked(DBusWatch(preset: try DBusPreset(named: name), bus: bus), at: presetNode)
            } catch {
                throw presetNode.error(describing: error)
            }
        case (.some, .some):
            throw entry.error("a dbus watch has either match or preset, not both (a preset brings its own match)")
        case (nil, nil):
            throw entry.error("a dbus watch needs match (interface, member, sender, path, path_namespace, arg0…) or preset (\(DBusPreset.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
    }

    /// `dbus: "interface=…,member=…"` (on the system bus), or a mapping as in the config.
    public static func ruleSource(_ value: ConfigNode) throws(ConfigError) -> DBusWatch {
        if let text = try? value.string() {
            do {
                return try options(fromTail: text)
            } catch {
                throw value.error(describing: error)
            }
        }
        let fields = try value.fields(allowed: configKeys)
        return try options(from: fields, of: value, directory: "/")
    }

    /// `interface=…,member=…,arg0=…`, with `bus=user` or `bus=unix:path=…` for another bus than
    /// the system's, or `preset=sleep` (``DBusWatch/init(parsing:)``).
    public static func options(fromTail value: String) throws -> DBusWatch {
        try DBusWatch(parsing: value)
    }

    public static func register(on bus: Bus, environment: SourceEnvironment) -> (@Sendable () -> [String: String])? {
        let driver = DBusDriver.register(on: bus)
        return { driver.sourceStates }
    }

    private static func match(_ node: ConfigNode) throws(ConfigError) -> DBusMatch {
        var pairs: [(key: String, value: String)] = []
        for (key, value) in try node.mapping() { pairs.append((key, try value.string())) }
        do {
            return try DBusMatch(pairs: pairs)
        } catch {
            throw node.error(describing: error)
        }
    }

    private static func checked(_ watch: DBusWatch, at node: ConfigNode) throws(ConfigError) -> DBusWatch {
        do {
            try watch.validate()
        } catch {
            throw node.error(describing: error)
        }
        return watch
    }
}
