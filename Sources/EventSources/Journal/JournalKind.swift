import ConfigText
import EventBusKit

/// The `journal` source kind: the systemd journal's entries (README.md in this folder).
public enum JournalKind: SourceKind {
    public typealias Options = JournalWatch

    public static let configSection = "journal"
    public static let configKeys = ["unit", "identifier", "priority", "directory", "consumer"]
    public static let tailOption = TailOption(option: "journal", wire: .member("journal"))
    public static let notices = ["journal.gap"]

    /// `{name, unit?, identifier?, priority?, directory?, consumer?}`; the conditions given must
    /// all hold.
    public static func options(from fields: [String: ConfigNode], of entry: ConfigNode,
                               directory: String) throws(ConfigError) -> JournalWatch {
        var match = JournalMatch.all
        if let unit = fields["unit"] { match = match && .unit(try unit.string()) }
        if let identifier = fields["identifier"] { match = match && .identifier(try identifier.string()) }
        if let priorityNode = fields["priority"] {
            let text = try priorityNode.string()
            guard let priority = JournalPriority.allCases.first(where: { $0.description == text }) else {
                throw priorityNode.error("expected one of: \(JournalPriority.allCases.map(\.description).joined(separator: ", ")), found \"\(text)\"")
            }
            match = match && .priority(atMost: priority)
        }
        var watch = JournalWatch(match: match)
        if let directory = fields["directory"] { watch.location = .directory(try directory.string()) }
        if let consumer = fields["consumer"] { watch.consumer = try consumer.string() }
        do {
            try watch.validate()
        } catch {
            throw entry.error(describing: error)
        }
        return watch
    }

    /// `journal: UNIT` or a list of units: entries of any of them.
    public static func ruleSource(_ value: ConfigNode) throws(ConfigError) -> JournalWatch {
        let units = try value.strings()
        let watch = JournalWatch(match: units.dropFirst().reduce(JournalMatch.unit(units[0])) { $0 || .unit($1) })
        do {
            try watch.validate()
        } catch {
            throw value.error(describing: error)
        }
        return watch
    }

    /// The driver reads the state directory as each source starts, so a reload that moves it
    /// applies to the journal watches started after it.
    public static func register(on bus: Bus, environment: SourceEnvironment) -> (@Sendable () -> [String: String])? {
        JournalDriver.register(on: bus) {
            JournalDriver.Configuration(stateDirectory: environment.stateDirectory, lags: environment.journalLags,
                                        statuses: environment.journalStatuses)
        }
        let statuses = environment.journalStatuses
        return { statuses.all.mapValues(describe) }
    }

    /// A watch's status as `eventbus status` shows it: "following dir:/x", or "unavailable:
    /// why" (the following reason already says what it follows).
    private static func describe(_ status: JournalStatus) -> String {
        status.state == .following ? status.reason : "\(status.state.rawValue): \(status.reason)"
    }
}
