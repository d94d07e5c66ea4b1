import EventBusMetrics

/// The `metrics` section: where `/metrics` is served over HTTP. Off by default — the same text
/// is always available through the control socket (`eventbus metrics`), which needs no port.
public struct MetricsSettings: Sendable, Equatable {
    /// `metrics.listen`, such as `127.0.0.1:9464`; nil: no HTTP listener.
    public var listen: ListenAddress?

    public init(listen: ListenAddress? = nil) {
        self.listen = listen
    }
}

extension HostConfig {
    static func parseMetrics(_ node: ConfigNode) throws(ConfigError) -> MetricsSettings {
        var settings = MetricsSettings()
        for (key, value) in try node.mapping(allowed: ["listen"]) {
            switch key {
            case "listen":
                do {
                    settings.listen = try ListenAddress(parsing: try value.string())
                } catch let error as ConfigError {
                    throw error
                } catch {
                    throw value.error("\(error)")
                }
            default: preconditionFailure("key \(key) allowed but not handled")
            }
        }
        return settings
    }
}
