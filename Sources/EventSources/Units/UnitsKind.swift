import ConfigText
import EventBusKit

/// The `units` source kind: systemd units' states and jobs (README.md in this folder).
public enum UnitsKind: SourceKind {
    public typealias Options = UnitWatch

    public static let configSection = "units"
    public static let configKeys = ["units", "manager"]
    public static let tailOption = TailOption(option: "units", wire: .member("units"))
    public static let notices = ["units.gap"]

    /// `{name, units, manager?}`: `units` is a glob or a list of them, `manager` is `system`
    /// (the default), `user` or a D-Bus address.
    public static func options(from fields: [String: ConfigNode], of entry: ConfigNode,
                               directory: String) throws(ConfigError) -> UnitWatch {
        guard let unitsNode = fields["units"] else {
            throw entry.error("a units watch needs units (a name pattern or a list of them; \"*\" for all)")
        }
        let patterns = try unitsNode.strings(allowingEmpty: true)
        var manager = UnitManager.system
        if let managerNode = fields["manager"] {
            switch try managerNode.string() {
            case "system": manager = .system
            case "user": manager = .user
            case let address where address.contains(":"): manager = .address(address)
            case let other: throw managerNode.error("expected system, user or a D-Bus address (unix:path=…), found \"\(other)\"")
            }
        }
        let watch = UnitWatch(match: UnitMatch(patterns), manager: manager)
        do {
            try watch.validate()
        } catch {
            throw unitsNode.error(describing: error)
        }
        return watch
    }

    /// `units: PATTERN` or a list of patterns, of the system manager.
    public static func ruleSource(_ value: ConfigNode) throws(ConfigError) -> UnitWatch {
        let watch = UnitWatch(match: UnitMatch(try value.strings()))
        do {
            try watch.validate()
        } catch {
            throw value.error(describing: error)
        }
        return watch
    }

    public static func register(on bus: Bus, environment: SourceEnvironment) -> (@Sendable () -> [String: String])? {
        let driver = UnitsDriver.register(on: bus)
        return { driver.sourceStates }
    }
}
