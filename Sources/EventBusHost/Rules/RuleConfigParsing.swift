import EventBusKit
import EventSources
import Foundation
import Glibc
import ModuleLoading
import RuleActions
import SystemCalls
import TransientUnits
import Yams

/// Reads `rules:` lists — the host config's and each `rules.d/*.yaml` file's — into
/// ``RuleConfig``s, with every problem as a ``ConfigError`` at its file, line and key.
enum RuleConfigParser {
    static let actionKeys = ["run", "webhook", "post", "log"]
    /// Keys that shape a `run:` action, allowed beside it (on the rule or a `then:` item).
    static let runKeys = ["shell", "user", "group", "timeout", "working_directory", "environment", "properties"]
    static let operatorKeys = ["debounce", "throttle", "distinct", "collect"]
    static let ruleKeys = ["name", "on", "all_of", "within", "from", "where", "mode", "max", "then", "enabled"]
        + operatorKeys + actionKeys + runKeys

    /// The longest a rule name may be: it becomes part of transient unit names (255 bytes in all).
    static let maximumNameLength = 100

    /// The rules of one `rules:` list; each bad rule is reported, not only the first.
    static func parseList(_ node: ConfigNode) throws(ConfigError) -> [RuleConfig] {
        var rules: [RuleConfig] = []
        var problems = ConfigProblems()
        for item in try node.sequence() {
            if let rule = problems.check({ () throws(ConfigError) in try parseRule(item) }) { rules.append(rule) }
        }
        try problems.throwIfAny()
        return rules
    }

    /// Refuses a second rule of the same name, wherever each was written.
    static func checkUniqueNames(_ rules: [RuleConfig]) throws(ConfigError) {
        var seen: [String: String] = [:]
        var problems: [ConfigError] = []
        for rule in rules {
            if let first = seen[rule.name] {
                let (file, line) = split(location: rule.location)
                problems.append(ConfigError(file: file, line: line, key: "rules",
                                            message: "another rule is already named \"\(rule.name)\" (\(first))"))
            } else {
                seen[rule.name] = rule.location
            }
        }
        if let error = ConfigError.combined(problems) { throw error }
    }

    static func split(location: String) -> (file: String, line: Int?) {
        guard let colon = location.lastIndex(of: ":") else { return (location, nil) }
        return (String(location[..<colon]), Int(location[location.index(after: colon)...]))
    }

    private static func parseRule(_ node: ConfigNode) throws(ConfigError) -> RuleConfig {
        let entries = try node.mapping(allowed: ruleKeys)
        let fields = Dictionary(uniqueKeysWithValues: entries.map { ($0.key, $0.value) })
        guard let nameNode = fields["name"] else { throw node.error("a rule needs a name") }
        let name = try nameNode.string()
        guard isValidRuleName(name) else {
            throw nameNode.error("a rule name is 1 to \(maximumNameLength) letters, digits, '.', '_' and '-', starting with a letter or digit")
        }
        let trigger = try parseTrigger(fields, in: node)
        let sources = try fields["from"].map { (from) throws(ConfigError) in try parseSources(from) } ?? []
        var conditions = RuleConditions()
        if let whereNode = fields["where"] { conditions = try parseConditions(whereNode) }
        var operators: [RuleOperator] = []
        for (key, value) in entries where operatorKeys.contains(key) {
            operators.append(try parseOperator(key, value))
        }
        let mode = try parseMode(fields)
        let actions: [RuleAction]
        if let thenNode = fields["then"] {
            for key in actionKeys + runKeys where fields[key] != nil {
                throw fields[key]!.error("a rule with then: lists its actions there; move \(key) into one of them")
            }
            actions = try thenNode.sequence().map { (item) throws(ConfigError) in
                try parseAction(try item.fields(allowed: actionKeys + runKeys), in: item)
            }
            guard !actions.isEmpty else { throw thenNode.error("then: needs at least one action") }
        } else {
            actions = [try parseAction(fields, in: node)]
        }
        var rule = RuleConfig(name: name, location: "\(node.file):\(nameNode.line ?? node.line ?? 0)", trigger: trigger,
                              conditions: conditions, operators: operators, mode: mode, actions: actions,
                              enabled: try fields["enabled"]?.bool() ?? true)
        rule.sources = sources
        return rule
    }

    static func isValidRuleName(_ name: String) -> Bool {
        (1...maximumNameLength).contains(name.utf8.count) && HostConfig.isValidName(name)
    }

    private static func patterns(_ node: ConfigNode) throws(ConfigError) -> [EventPattern] {
        let texts: [(String, ConfigNode)]
        if let single = try? node.string() {
            texts = [(single, node)]
        } else {
            texts = try node.sequence().map { (item) throws(ConfigError) in (try item.string(), item) }
        }
        guard !texts.isEmpty else { throw node.error("needs at least one event pattern") }
        return try texts.map { (text, item) throws(ConfigError) in
            do { return try EventPattern(text) } catch { throw item.error(HostConfig.message(of: error)) }
        }
    }

    private static func parseTrigger(_ fields: [String: ConfigNode], in node: ConfigNode) throws(ConfigError) -> RuleTrigger {
        switch (fields["on"], fields["all_of"]) {
        case (let on?, nil):
            if let within = fields["within"] { throw within.error("within: is the window of all_of; a rule with on: has none") }
            return .any(try patterns(on))
        case (nil, let allOf?):
            let list = try patterns(allOf)
            guard list.count >= 2 else { throw allOf.error("all_of needs at least two patterns (one is on:)") }
            guard let within = fields["within"] else {
                throw allOf.error("all_of needs within: the window in which every pattern must be seen (such as 10m)")
            }
            let window = try within.duration()
            guard window > .zero else { throw within.error("must be longer than 0s") }
            return .allOf(list, within: window)
        case (.some, .some):
            throw node.error("a rule has either on or all_of, not both")
        case (nil, nil):
            throw node.error("a rule needs on: (an event pattern or a list of them) or all_of:")
        }
    }

    /// `from: {<kind>: value, …}`: each source kind's short form (``SourceKind/ruleSource(_:)``),
    /// e.g. `files: PATH or {path, recursive}`, `journal: UNIT(s)`, `units: PATTERN(s)`,
    /// `devices: SUBSYSTEM or "*"`.
    private static func parseSources(_ node: ConfigNode) throws(ConfigError) -> [ConfiguredSource] {
        var sources: [ConfiguredSource] = []
        for (key, value) in try node.mapping(allowed: SourceKinds.all.map { $0.configSection }) {
            let kind = SourceKinds.all.first { $0.configSection == key }!
            sources.append(ConfiguredSource(try kind.ruleSource(value)))
        }
        return sources
    }

    private static func parseConditions(_ node: ConfigNode) throws(ConfigError) -> RuleConditions {
        var conditions = RuleConditions()
        for (field, value) in try node.mapping() {
            let items: [ConfigNode]
            if case .sequence = value.node { items = try value.sequence() } else { items = [value] }
            guard !items.isEmpty else { throw value.error("needs at least one value") }
            for item in items {
                guard case .scalar(let scalar) = item.node, (try? item.string()) != nil || item.node.int != nil
                        || item.node.bool != nil || item.node.float != nil else {
                    throw item.error("expected a value (text, glob, number, true/false, or a comparison such as \">=90\")")
                }
                guard conditions.add(scalar.string, to: field) else {
                    throw item.error("\"\(scalar.string)\" starts like a comparison but no number follows")
                }
            }
        }
        return conditions
    }

    private static func parseOperator(_ key: String, _ node: ConfigNode) throws(ConfigError) -> RuleOperator {
        switch key {
        case "debounce": return .debounce(try positive(node))
        case "throttle": return .throttle(try positive(node))
        case "distinct":
            let names: [String]
            if let single = try? node.string() { names = [single] } else {
                names = try node.sequence().map { (item) throws(ConfigError) in try item.string() }
            }
            guard !names.isEmpty else { throw node.error("names the fields to compare: distinct: [unit, state]") }
            return .distinct(names)
        default:
            if node.node.int != nil { return .collect(count: try node.int(atLeast: 1), window: nil) }
            if case .mapping = node.node {
                let fields = try node.fields(allowed: ["count", "window"])
                let count = try fields["count"]?.int(atLeast: 1)
                let window = try fields["window"].map { (item) throws(ConfigError) in try positive(item) }
                guard count != nil || window != nil else { throw node.error("collect needs count, window or both") }
                return .collect(count: count, window: window)
            }
            return .collect(count: nil, window: try positive(node))
        }
    }

    private static func positive(_ node: ConfigNode) throws(ConfigError) -> Duration {
        let duration = try node.duration()
        guard duration > .zero else { throw node.error("must be longer than 0s") }
        return duration
    }

    static let defaultQueueMax = 10
    static let defaultParallelMax = 10

    private static func parseMode(_ fields: [String: ConfigNode]) throws(ConfigError) -> RuleMode {
        let text = try fields["mode"]?.string() ?? "single"
        let max = try fields["max"]?.int(atLeast: 1)
        switch text {
        case "single", "restart":
            if let node = fields["max"] { throw node.error("max: bounds queued and parallel modes; \(text) runs one at a time") }
            return text == "single" ? .single : .restart
        case "queued": return .queued(max: max ?? defaultQueueMax)
        case "parallel": return .parallel(max: max ?? defaultParallelMax)
        default: throw fields["mode"]!.error("expected one of: single, restart, queued, parallel, found \"\(text)\"")
        }
    }

    private static func template(_ node: ConfigNode) throws(ConfigError) -> RuleTemplate {
        let text: String
        if case .scalar(let scalar) = node.node, node.node.int != nil || node.node.bool != nil || node.node.float != nil {
            text = scalar.string
        } else {
            text = try node.string()
        }
        do { return try RuleTemplate(text) } catch { throw node.error(error.message) }
    }

    private static func parseAction(_ fields: [String: ConfigNode], in node: ConfigNode) throws(ConfigError) -> RuleAction {
        let present = actionKeys.filter { fields[$0] != nil }
        guard present.count == 1, let kind = present.first else {
            throw node.error(present.isEmpty ? "needs an action: run, webhook, post or log (or then: a list of them)"
                                             : "has \(present.joined(separator: " and ")); one action each (then: runs several in order)")
        }
        if kind != "run" {
            for key in runKeys where fields[key] != nil { throw fields[key]!.error("belongs to a run: action") }
        }
        let value = fields[kind]!
        switch kind {
        case "run": return .run(try parseRun(value, fields))
        case "webhook": return .webhook(try parseWebhook(value))
        case "post":
            if let name = try? value.string() { return .post(name: try eventName(value, name), fields: [:]) }
            let parts = try value.fields(allowed: ["name", "fields"])
            guard let nameNode = parts["name"] else { throw value.error("post needs a name") }
            var templates: [String: RuleTemplate] = [:]
            if let fieldsNode = parts["fields"] {
                for (key, item) in try fieldsNode.mapping() { templates[key] = try template(item) }
            }
            return .post(name: try eventName(nameNode, try nameNode.string()), fields: templates)
        default:
            if case .scalar = value.node { return .log(level: .info, message: try template(value)) }
            let parts = try value.fields(allowed: ["level", "message"])
            guard let message = parts["message"] else { throw value.error("log needs a message") }
            var level = ModuleLog.Level.info
            if let levelNode = parts["level"] {
                let text = try levelNode.string()
                guard let parsed = ModuleLog.Level(rawValue: text) else {
                    throw levelNode.error("expected one of: \(ModuleLog.Level.allCases.map(\.rawValue).joined(separator: ", ")), found \"\(text)\"")
                }
                level = parsed
            }
            return .log(level: level, message: try template(message))
        }
    }

    /// A posted name: checked now when it has no placeholder, else when it is expanded.
    private static func eventName(_ node: ConfigNode, _ text: String) throws(ConfigError) -> RuleTemplate {
        let name = try template(node)
        if !name.hasPlaceholders {
            do { try EventPattern.validate(eventName: text) } catch { throw node.error(HostConfig.message(of: error)) }
        }
        return name
    }

    private static func parseRun(_ value: ConfigNode, _ fields: [String: ConfigNode]) throws(ConfigError) -> RunAction {
        let shell = try fields["shell"]?.bool() ?? false
        var argv: [RuleTemplate]
        if shell {
            _ = try value.string()
            let line = try template(value)
            guard !line.hasPlaceholders else {
                throw value.error("a shell command line takes no {{field}}: a field's value would be read by the shell; use \"$EVENTBUS_FIELD_NAME\" (quoted) instead")
            }
            argv = [RuleTemplate(literal: "/bin/sh"), RuleTemplate(literal: "-c"), line]
        } else {
            guard case .sequence = value.node else {
                throw value.error("expected the program and its arguments as a list ([\"/usr/bin/systemctl\", \"reload\", \"nginx.service\"]); a command line for /bin/sh needs shell: true")
            }
            argv = try value.sequence().map { (item) throws(ConfigError) in try template(item) }
            guard let program = argv.first else { throw value.error("needs at least the program") }
            let programNode = try value.sequence()[0]
            guard !program.hasPlaceholders else { throw programNode.error("the program cannot come from a field; name it as an absolute path") }
            try checkProgram(program.description, programNode)
        }
        var action = RunAction(argv: argv, shell: shell)
        action.user = try fields["user"]?.string()
        action.group = try fields["group"]?.string()
        if let timeout = fields["timeout"] { action.timeout = try positive(timeout) }
        if let directory = fields["working_directory"] {
            let path = try directory.string()
            guard path.hasPrefix("/") else { throw directory.error("must be an absolute path") }
            action.workingDirectory = path
        }
        if let environment = fields["environment"] {
            for (key, item) in try environment.mapping() {
                guard !key.isEmpty, !key.contains("="), !key.hasPrefix("EVENTBUS_") else {
                    throw item.error("an environment name has no '=' and does not start with EVENTBUS_ (the host sets those)")
                }
                action.environment[key] = try template(item)
            }
        }
        if let properties = fields["properties"] {
            for (key, item) in try properties.mapping() {
                guard case .scalar(let scalar) = item.node else { throw item.error("expected a value as a unit file would have it") }
                let property = UnitProperty(name: key, value: scalar.string)
                if let problem = TransientUnitLauncher.check([property]).first { throw item.error(problem) }
                action.properties.append(property)
            }
        }
        return action
    }

    /// The program must be an absolute path to an executable file: refused at load, with the
    /// line, rather than failing every run.
    private static func checkProgram(_ path: String, _ node: ConfigNode) throws(ConfigError) {
        guard path.hasPrefix("/") else { throw node.error("the program must be an absolute path, found \"\(path)\"") }
        let status: System.FileStatus
        do { status = try System.status(of: path) } catch { throw node.error("\(path): \(error.reason)") }
        guard status.isRegularFile else { throw node.error("\(path) is not a regular file") }
        guard System.isAccessible(path, .executable) else { throw node.error("\(path) is not executable") }
    }

    private static func parseWebhook(_ value: ConfigNode) throws(ConfigError) -> WebhookAction {
        var action = WebhookAction(url: RuleTemplate(literal: ""), method: "POST", headers: [], body: nil,
                                   timeout: .seconds(10), attempts: 10)
        let urlNode: ConfigNode
        if (try? value.string()) != nil {
            urlNode = value
        } else {
            let fields = try value.fields(allowed: ["url", "method", "headers", "body", "timeout", "attempts"])
            guard let url = fields["url"] else { throw value.error("a webhook needs a url") }
            urlNode = url
            if let method = fields["method"] {
                action.method = try method.string().uppercased()
                guard ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(action.method) else {
                    throw method.error("expected GET, POST, PUT, PATCH or DELETE")
                }
            }
            if let headers = fields["headers"] {
                for (name, item) in try headers.mapping() {
                    guard name.utf8.allSatisfy({ $0 > 32 && $0 < 127 && $0 != UInt8(ascii: ":") }) else {
                        throw item.error("a header name is visible ASCII without ':'")
                    }
                    action.headers.append((name, try template(item)))
                }
            }
            if let body = fields["body"] { action.body = try template(body) }
            if let timeout = fields["timeout"] { action.timeout = try positive(timeout) }
            if let attempts = fields["attempts"] { action.attempts = try attempts.int(atLeast: 1) }
        }
        let url = try template(urlNode)
        guard url.description.hasPrefix("http://") || url.description.hasPrefix("https://") else {
            throw urlNode.error("expected an http:// or https:// URL")
        }
        action.url = url
        return action
    }
}
