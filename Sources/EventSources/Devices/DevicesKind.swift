import ConfigText
import EventBusKit

/// The `devices` source kind: kernel and udev device events (README.md in this folder).
public enum DevicesKind: SourceKind {
    public typealias Options = DeviceWatch

    public static let configSection = "devices"
    public static let configKeys = ["subsystem", "devtype", "tag", "layer"]
    public static let tailOption = TailOption(option: "devices", wire: .member("devices"))
    public static let notices = ["devices.gap", "devices.error"]

    /// `{name, subsystem?, devtype?, tag?, layer?}`.
    public static func options(from fields: [String: ConfigNode], of entry: ConfigNode,
                               directory: String) throws(ConfigError) -> DeviceWatch {
        var watch = DeviceWatch()
        if let subsystem = fields["subsystem"] { watch.subsystem = try subsystem.string() }
        if let devtype = fields["devtype"] { watch.devtype = try devtype.string() }
        if let tag = fields["tag"] { watch.tag = try tag.string() }
        if let layerNode = fields["layer"] {
            let text = try layerNode.string()
            guard let layer = DeviceLayerChoice(rawValue: text) else {
                throw layerNode.error("expected one of: \(DeviceLayerChoice.allCases.map(\.rawValue).joined(separator: ", ")), found \"\(text)\"")
            }
            watch.layer = layer
        }
        do {
            try watch.validate()
        } catch {
            throw entry.error(describing: error)
        }
        return watch
    }

    /// `devices: SUBSYSTEM`, or `"*"` for every subsystem.
    public static func ruleSource(_ value: ConfigNode) throws(ConfigError) -> DeviceWatch {
        let subsystem = try value.string()
        var watch = DeviceWatch()
        if subsystem != "*" { watch.subsystem = subsystem }
        do {
            try watch.validate()
        } catch {
            throw value.error(describing: error)
        }
        return watch
    }

    public static func register(on bus: Bus, environment: SourceEnvironment) -> (@Sendable () -> [String: String])? {
        DeviceSources.register(on: bus)
        return nil
    }
}
