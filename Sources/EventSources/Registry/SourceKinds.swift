import EventBusKit

/// The source kinds the host offers: the one registration point (``SourceKind``).
public enum SourceKinds {
    /// Every kind, in the order `status`, the metrics and the docs list them. Adding a source
    /// kind is its folder and one line here (docs/adding-a-source.md).
    public static let all: [any SourceKind.Type] = [
        FilesKind.self,
        JournalKind.self,
        DevicesKind.self,
        UnitsKind.self,
        DBusKind.self,
    ]

    /// The names of the kinds the SDK itself implements, which need no driver from the host.
    public static let builtIn = [TimerSchedule.kind]

    /// The kind named `name` (`files`, `dbus`), if the host offers it.
    public static func kind(named name: String) -> (any SourceKind.Type)? {
        all.first { $0.name == name }
    }

    /// Every kind's and the SDK's own kinds' names: the bounded label set of the metrics.
    public static var names: [String] { builtIn + all.map { $0.name } }

    /// Registers every kind's driver on `bus`. Returns the running sources' states by source
    /// id, for `status`.
    public static func registerAll(on bus: Bus, environment: SourceEnvironment) -> @Sendable () -> [String: String] {
        let states = all.compactMap { $0.register(on: bus, environment: environment) }
        return { states.reduce(into: [:]) { merged, state in merged.merge(state()) { first, _ in first } } }
    }
}
