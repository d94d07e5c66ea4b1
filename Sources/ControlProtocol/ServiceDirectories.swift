/// The folders systemd made for the service (systemd.exec(5): `StateDirectory=`,
/// `RuntimeDirectory=`, `ConfigurationDirectory=` set `$STATE_DIRECTORY`, `$RUNTIME_DIRECTORY`,
/// `$CONFIGURATION_DIRECTORY`, each a colon-separated list of absolute paths). Under a unit they
/// are the paths the service may write and is meant to use, so they win over guesses from the
/// user's id or home (the service user's home need not exist).
public enum ServiceDirectories {
    /// The first absolute path of such a list, nil when unset or empty.
    public static func first(of list: String?) -> String? {
        guard let list else { return nil }
        return list.split(separator: ":").first { $0.hasPrefix("/") }.map(String.init)
    }
}
