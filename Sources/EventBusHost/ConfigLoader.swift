import EventBusKit
import EventSources
import Foundation
import ModuleIsolation
import ModuleLoading
import Yams

extension HostConfig {
    /// Reads and checks a config file. Every problem is a ``ConfigError`` naming the file, the
    /// line and the key; nothing is half-applied: the caller gets a whole config or an error.
    ///
    /// The file must come from a trusted place (see ``FileTrust``), since it names code the host
    /// will run.
    public static func load(from path: String) throws(ConfigError) -> HostConfig {
        let (config, problems) = try loadCollecting(from: path)
        if let problems { throw problems }
        return config
    }

    /// What `--check-config` reads: the config with every section that parsed, and the problems
    /// of the others (nil if none), so a mistake in one section does not keep the modules from
    /// being checked. Throws only when there is no config to speak of: an unreadable or
    /// untrusted file, text that is not UTF-8 or not YAML.
    public static func loadCollecting(from path: String) throws(ConfigError) -> (config: HostConfig, problems: ConfigError?) {
        let absolute = Self.absolute(path, relativeTo: FileManager.default.currentDirectoryPath)
        let text = try readTrustedText(absolute, named: path, kind: "config file")
        let directory = (absolute as NSString).deletingLastPathComponent
        var (config, problems) = try parseCollecting(text, file: path, directory: directory)
        var all = problems?.all ?? []
        let dropIns = loadRuleDropIns(in: directory)
        config.rules += dropIns.rules
        config.ruleFiles = dropIns.files
        all += dropIns.problems
        do throws(ConfigError) { try RuleConfigParser.checkUniqueNames(config.rules) } catch { all += error.all }
        return (config, ConfigError.combined(all))
    }

    /// `rules.d/*.yaml` beside the config, in name order: each file a `rules:` list, trusted
    /// as the config is (it names commands the host will run). No folder: no drop-ins.
    static func loadRuleDropIns(in directory: String) -> (rules: [RuleConfig], files: [String], problems: [ConfigError]) {
        let folder = directory + "/rules.d"
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return ([], [], []) }
        var rules: [RuleConfig] = []
        var files: [String] = []
        var problems: [ConfigError] = []
        for name in names.sorted() where name.hasSuffix(".yaml") && !name.hasPrefix(".") {
            let file = folder + "/" + name
            files.append(file)
            do throws(ConfigError) {
                rules += try loadRuleFile(file)
            } catch {
                problems += error.all
            }
        }
        return (rules, files, problems)
    }

    private static func loadRuleFile(_ file: String) throws(ConfigError) -> [RuleConfig] {
        let text = try readTrustedText(file, named: file, kind: "rules file")
        let root: Node?
        do { root = try Yams.compose(yaml: text) } catch { throw ConfigError(yamlError: error, file: file) }
        guard let root else { return [] }
        let document = ConfigNode(node: root, file: file, key: "")
        guard let list = try document.fields(allowed: ["rules"])["rules"] else { return [] }
        return try RuleConfigParser.parseList(list)
    }

    /// The text of a file that names code the host will run (the config, a rules drop-in): from
    /// a trusted place (``FileTrust``), readable, UTF-8. Errors name it as `named`, a `kind`.
    private static func readTrustedText(_ path: String, named: String, kind: String) throws(ConfigError) -> String {
        func fileError(_ message: String) -> ConfigError { ConfigError(file: named, line: nil, key: "", message: message) }
        do {
            try FileTrust.check(path)
        } catch {
            switch error {
            case .missing(let error): throw fileError("cannot read the \(kind): \(error.reason)")
            case .untrusted(let reason): throw fileError("\(kind) refused: \(reason)")
            }
        }
        let bytes: [UInt8]
        do { bytes = try System.readFile(path) } catch { throw fileError("cannot read the \(kind): \(error.reason)") }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw fileError("the \(kind) is not UTF-8 text") }
        return text
    }

    /// Parses config text. `file` names it in errors; relative module paths resolve against
    /// `directory`.
    static func parse(_ text: String, file: String, directory: String) throws(ConfigError) -> HostConfig {
        let (config, problems) = try parseCollecting(text, file: file, directory: directory)
        if let problems { throw problems }
        return config
    }

    static let topLevelKeys = ["sources", "modules", "module_mailbox_capacity", "module_mailbox_bytes", "module_isolation",
                               "shutdown_timeout", "control", "state_directory", "bridge", "metrics", "rules", "rules_launcher"]

    /// The sections that parse, and the problems of those that do not (an unknown key too).
    private static func parseCollecting(_ text: String, file: String, directory: String) throws(ConfigError) -> (HostConfig, ConfigError?) {
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch {
            throw ConfigError(yamlError: error, file: file)
        }
        var config = HostConfig(file: file)
        guard let root else { return (config, nil) }  // an empty file: nothing configured
        let document = ConfigNode(node: root, file: file, key: "")
        // Each section on its own: a mistake in one is reported with the mistakes of the others.
        var problems = ConfigProblems()
        for (key, value) in try document.mapping() {
            problems.check { () throws(ConfigError) in
                guard topLevelKeys.contains(key) else { throw value.unknownKey(key, allowed: topLevelKeys) }
                switch key {
                case "sources": (config.timers, config.watches) = try parseSources(value, directory: directory)
                case "state_directory":
                    config.stateDirectory = try value.string()
                    guard config.stateDirectory.hasPrefix("/") else { throw value.error("must be an absolute path") }
                case "modules": config.modules = try parseModules(value, directory: directory)
                case "module_mailbox_capacity": config.moduleMailbox.events = try value.int(atLeast: 1)
                case "module_mailbox_bytes": config.moduleMailbox.bytes = try value.byteSize(atLeast: 1)
                case "module_isolation": config.moduleIsolation = try parseIsolation(value)
                case "shutdown_timeout": config.shutdownTimeout = try value.duration()
                case "control": config.control = try parseControl(value, directory: directory)
                case "bridge": config.bridge = try parseBridge(value, directory: directory)
                case "metrics": config.metrics = try parseMetrics(value)
                case "rules": config.rules = try RuleConfigParser.parseList(value)
                case "rules_launcher":
                    let text = try value.string()
                    guard let choice = RulesLauncherChoice(rawValue: text) else {
                        throw value.error("expected one of: \(RulesLauncherChoice.allCases.map(\.rawValue).joined(separator: ", ")), found \"\(text)\"")
                    }
                    config.rulesLauncher = choice
                default: preconditionFailure("key \(key) allowed but not handled")
                }
            }
        }
        for index in config.modules.indices where config.modules[index].isolationFromHost {
            config.modules[index].isolation = config.moduleIsolation
        }
        return (config, ConfigError.combined(problems.errors))
    }

    /// `sources:`: the timers, and a section per source kind (``SourceKinds``), each a list of
    /// named watches.
    private static func parseSources(_ node: ConfigNode, directory: String) throws(ConfigError) -> ([TimerConfig], [WatchConfig]) {
        var timers: [TimerConfig] = []
        var watches: [WatchConfig] = []
        for (key, value) in try node.mapping(allowed: ["timers"] + SourceKinds.all.map { $0.configSection }) {
            guard key == "timers" else {
                let kind = SourceKinds.all.first { $0.configSection == key }!
                for item in try value.sequence() {
                    let fields = try item.fields(allowed: ["name"] + kind.configKeys)
                    guard let nameNode = fields["name"] else { throw item.error("a watch needs a name") }
                    let name = try nameNode.string()
                    guard !name.isEmpty else { throw nameNode.error("must not be empty") }
                    if watches.contains(where: { $0.name == name }) {
                        throw nameNode.error("another watch is already named \"\(name)\"")
                    }
                    watches.append(WatchConfig(name: name, source: try kind.options(from: fields, of: item, directory: directory)))
                }
                continue
            }
            for item in try value.sequence() {
                let (timer, nameNode) = try parseTimer(item)
                if timers.contains(where: { $0.name == timer.name }) {
                    throw nameNode.error("another timer is already named \"\(timer.name)\"")
                }
                timers.append(timer)
            }
        }
        return (timers, watches)
    }

    private static let timerKeys = ["name", "every", "calendar", "tolerance", "missed_runs"]

    private static func parseTimer(_ node: ConfigNode) throws(ConfigError) -> (TimerConfig, nameNode: ConfigNode) {
        let fields = try node.fields(allowed: timerKeys)
        guard let nameNode = fields["name"] else { throw node.error("a timer needs a name") }
        let name = try nameNode.string()
        guard !name.isEmpty else { throw nameNode.error("must not be empty") }
        let tolerance = try fields["tolerance"]?.duration() ?? .zero
        var missedRuns = MissedRunPolicy.fireOnce
        if let missedNode = fields["missed_runs"] {
            let text = try missedNode.string()
            guard let policy = MissedRunPolicy(rawValue: text) else {
                throw missedNode.error("expected one of: \(MissedRunPolicy.allCases.map(\.rawValue).joined(separator: ", ")), found \"\(text)\"")
            }
            missedRuns = policy
        }
        switch (fields["every"], fields["calendar"]) {
        case (let every?, nil):
            let interval = try every.duration()
            do {
                return (TimerConfig(name: name, schedule: try .every(interval, tolerance: tolerance, missedRuns: missedRuns)), nameNode)
            } catch {
                throw every.error(Self.message(of: error))
            }
        case (nil, let calendar?):
            let spec = try calendar.string()
            do {
                return (TimerConfig(name: name, schedule: try .calendar(spec, tolerance: tolerance, missedRuns: missedRuns)), nameNode)
            } catch {
                throw calendar.error(Self.message(of: error))
            }
        case (.some, .some):
            throw node.error("a timer has either every or calendar, not both")
        case (nil, nil):
            throw node.error("a timer needs every (an interval such as 30s) or calendar (such as \"*-*-* 03:00\")")
        }
    }

    /// The SDK's own words for what is wrong, without its error code.
    static func message(of error: any Error) -> String {
        (error as? EventBusError)?.message ?? "\(error)"
    }

    private static func parseModules(_ node: ConfigNode, directory: String) throws(ConfigError) -> [ModuleEntry] {
        var modules: [ModuleEntry] = []
        // Module by module: each bad entry is reported, not only the first.
        var problems = ConfigProblems()
        for (name, value) in try node.mapping() {
            problems.check { () throws(ConfigError) in
                guard isValidName(name) else {
                    throw value.error("a module name is letters, digits, '.', '_' and '-', starting with a letter or digit")
                }
                let fields = try value.fields(allowed: ["path", "enabled", "mailbox_capacity", "mailbox_bytes", "config", "isolation", "worker"] + execKeys)
                guard let pathNode = fields["path"] ?? fields["exec"] else {
                    throw value.error("a module needs a path (its .so file) or exec (a program and its arguments)")
                }
                let path = fields["exec"] == nil ? try pathNode.string() : "exec"  // an exec module's path is set below
                guard !path.isEmpty else { throw pathNode.error("must not be empty") }
                var config = ModuleConfig()
                var lines: [String: Int] = [:]
                if let section = fields["config"] {
                    var budget = ConfigExpansionBudget(section: section)
                    for (key, item) in try section.mapping() { config.values[key] = try item.configValue(within: &budget) }
                    // Walks no more than the budget just allowed.
                    lines = section.keyLines()
                }
                var entry = ModuleEntry(
                    name: name,
                    path: absolute(path, relativeTo: directory),
                    enabled: try fields["enabled"]?.bool() ?? true,
                    mailboxCapacity: try fields["mailbox_capacity"]?.int(atLeast: 1),
                    config: config,
                    location: "\(node.file):\(pathNode.line ?? value.line ?? 0)")
                entry.configLocations = ModuleConfigLocations(
                    file: node.file, key: "modules.\(name).config",
                    sectionLine: fields["config"].flatMap { $0.keyLine ?? $0.line } ?? value.keyLine ?? value.line, lines: lines)
                if let isolation = fields["isolation"] {
                    entry.isolation = try parseIsolation(isolation)
                } else {
                    entry.isolationFromHost = true
                }
                entry.mailboxBytes = try fields["mailbox_bytes"]?.byteSize(atLeast: 1)
                if let worker = fields["worker"] { entry.worker = try parseWorker(worker) }
                try parseExec(fields, into: &entry, directory: directory)
                modules.append(entry)
            }
        }
        try problems.throwIfAny()
        return modules
    }

    /// A module's or a rule's name: ASCII letters, digits, '.', '_' and '-', starting with a
    /// letter or digit (it becomes part of file, unit and metric label names).
    static func isValidName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first.properties.isAlphabetic || ("0"..."9").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { scalar in
            scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar) || "._-".unicodeScalars.contains(scalar))
        }
    }

    static func absolute(_ path: String, relativeTo directory: String) -> String {
        let url = path.hasPrefix("/") ? URL(fileURLWithPath: path)
                                      : URL(fileURLWithPath: directory, isDirectory: true).appendingPathComponent(path)
        return url.standardizedFileURL.path
    }
}

extension ConfigError {
    /// Yams' errors, reduced to file, line and libyaml's own words.
    init(yamlError error: any Error, file: String) {
        guard let yaml = error as? YamlError else {
            self.init(file: file, line: nil, key: "", message: "cannot parse YAML: \(error)")
            return
        }
        switch yaml {
        case .scanner(let context, let problem, let mark, _),
             .parser(let context, let problem, let mark, _),
             .composer(let context, let problem, let mark, _):
            let while_ = context.map { " (\($0.text) at line \($0.mark.line))" } ?? ""
            self.init(file: file, line: mark.line, key: "", message: "invalid YAML: \(problem)\(while_)")
        case .duplicatedKeysInMapping(let duplicates, let context):
            self.init(file: file, line: context.mark.line, key: "",
                      message: "duplicate key \(duplicates.map { "\"\($0)\"" }.joined(separator: ", ")) in one mapping")
        case .reader(let problem, let offset, _, let yaml):
            let line = offset.map { yaml.prefix($0).reduce(1) { $1 == "\n" ? $0 + 1 : $0 } }
            self.init(file: file, line: line, key: "", message: "cannot read YAML: \(problem)")
        default:
            self.init(file: file, line: nil, key: "", message: "cannot parse YAML: \(yaml)")
        }
    }
}
