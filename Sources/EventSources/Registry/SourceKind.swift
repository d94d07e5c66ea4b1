import ConfigText
import EventBusKit

/// One kind of source the host offers — files, the journal, devices, units, D-Bus signals —
/// declared once, in its folder, and listed once in ``SourceKinds/all``.
///
/// Why one declaration: every part of the host that deals in sources (the config's `sources:`
/// sections, a rule's `from:`, `eventbus tail`'s options, a module worker's requests, the
/// metrics' labels, `status`) reads the kinds from that list. A kind added there is offered
/// everywhere at once; a kind missing from it is offered nowhere, which the kind-completeness
/// test and `docs/adding-a-source.md` make plain.
public protocol SourceKind {
    /// The SDK's options of the kind; `Codable` so that a module in a worker process can ask
    /// the host for the very same source.
    associatedtype Options: SourceOptions & Codable

    /// The section under `sources:` in the host's config, and the key under a rule's `from:`.
    static var configSection: String { get }
    /// The keys an entry of that section takes besides `name`.
    static var configKeys: [String] { get }
    /// An entry of `sources.<configSection>` as options: `fields` holds its keys (already
    /// checked against ``configKeys``), `entry` is the entry itself (for errors that name its
    /// line), and a relative path resolves against `directory`, the config file's folder.
    static func options(from fields: [String: ConfigNode], of entry: ConfigNode,
                        directory: String) throws(ConfigError) -> Options
    /// A rule's `from: {<configSection>: value}`: the short form a rule writes in one line.
    static func ruleSource(_ value: ConfigNode) throws(ConfigError) -> Options

    /// The events of the kind that announce loss or trouble (`units.gap`): counted by name in
    /// the metrics' `eventbus_notices_total`.
    static var notices: [String] { get }

    /// How `eventbus tail` asks for the kind.
    static var tailOption: TailOption { get }
    /// The options one value of ``tailOption`` asks for, when it travels in the `subscribe`
    /// request's generic `sources` member (``TailOption/Wire/sources``).
    static func options(fromTail value: String) throws -> Options

    /// Registers the kind's driver on the host's bus. Returns the states of its running
    /// sources by source id, as `eventbus status` shows them (nil: the kind has none to say).
    static func register(on bus: Bus, environment: SourceEnvironment) -> (@Sendable () -> [String: String])?
}

extension SourceKind {
    /// The kind's name: the prefix of its sources' ids and its label in the metrics.
    public static var name: String { Options.kind }

    public static func options(fromTail value: String) throws -> Options {
        throw EventBusError(.sourceUnavailable, "\(name) sources are asked for with the subscribe request's \"\(name)\" member")
    }
}

/// The option of `eventbus tail` that adds a kind's events to a tail.
public struct TailOption: Sendable {
    /// How the option's values travel to the host.
    public enum Wire: Sendable {
        /// In a `subscribe` member of their own (`files`, `journal`, `devices`, `units`): the
        /// kinds that came before the registry, whose members clients already use.
        case member(String)
        /// In the generic member `sources: {"<kind>": ["<value>", …]}`, each value read by
        /// ``SourceKind/options(fromTail:)``.
        case sources
    }

    /// The long option, without its dashes (`dbus` for `--dbus`).
    public var option: String
    public var wire: Wire

    public init(option: String, wire: Wire) {
        self.option = option
        self.wire = wire
    }
}

extension ConfigNode {
    /// The error for this node that says what the SDK found wrong, in its own words.
    public func error(describing error: any Error) -> ConfigError {
        if let error = error as? ConfigError { return error }
        return self.error((error as? EventBusError)?.message ?? "\(error)")
    }

    /// One string, or a list of them; an empty list only when `allowingEmpty` (the caller then
    /// says what the list needs).
    public func strings(allowingEmpty: Bool = false) throws(ConfigError) -> [String] {
        if let single = try? string() { return [single] }
        let list = try sequence().map { (item) throws(ConfigError) in try item.string() }
        guard allowingEmpty || !list.isEmpty else { throw error("needs at least one") }
        return list
    }
}
