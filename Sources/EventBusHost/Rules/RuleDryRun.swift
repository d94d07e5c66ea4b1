import EventBusKit
import Foundation
import RuleActions

/// `eventbusd --test-rules EVENT` (and so `eventbus rules test`): which rules of a config would
/// fire for one event, and what each would run — templates filled in, nothing run.
///
/// "Would fire" means the event passes the rule's patterns and `where:`; what the rule's
/// operators and mode would then do depends on the events around it, so they are named, not
/// simulated. An `all_of` rule fires only once every pattern has been seen: the event is said
/// to fill its part.
public enum RuleDryRun {
    public struct Report: Sendable {
        public var lines: [String]
        /// 0: the config loaded (whether or not a rule fires); 1: it did not, or the event is malformed.
        public var exitCode: Int32
    }

    public static func run(configPath: String, event text: String) -> Report {
        let event: Event
        switch parse(text) {
        case .success(let parsed): event = parsed
        case .failure(let problem): return Report(lines: [problem.message], exitCode: 1)
        }
        let config: HostConfig
        do {
            config = try HostConfig.load(from: configPath)
        } catch {
            return Report(lines: ["\(error)"], exitCode: 1)
        }
        var lines = ["event \(event.name)\(event.fields.isEmpty ? "" : " ")\(event.fields.keys.sorted().map { "\($0)=\(event.fields[$0]!)" }.joined(separator: " "))"]
        var firing = 0
        let launcher = config.rulesLauncher
        for rule in config.rules {
            let matched = rule.trigger.patterns.filter { $0.matches(event.name) }
            guard !matched.isEmpty else { continue }
            guard rule.conditions.accepts(event) else {
                lines.append("rule \(rule.name) (\(rule.location)): the name matches, where: does not")
                continue
            }
            guard rule.enabled else {
                lines.append("rule \(rule.name) (\(rule.location)): would fire, but it is disabled")
                continue
            }
            firing += 1
            var head = "rule \(rule.name) (\(rule.location)): "
            if case .allOf(let patterns, let window) = rule.trigger {
                head += "fills \(matched.map(\.description).joined(separator: ", ")) of all_of [\(patterns.map(\.description).joined(separator: ", "))] within \(window); fires once all are seen"
            } else {
                head += "fires"
            }
            let operators = rule.operators.map(describe)
            if !operators.isEmpty { head += ", through \(operators.joined(separator: ", "))" }
            head += "; mode \(rule.mode.name)"
            lines.append(head)
            let trigger = RuleTriggerEvents([event])
            for (index, action) in rule.actions.enumerated() {
                lines.append("  \(index + 1). " + describe(action, rule: rule.name, trigger: trigger, launcher: launcher))
            }
        }
        lines.append(firing == 0 ? "no rule fires (\(config.rules.count) rule(s) read)" : "\(firing) of \(config.rules.count) rule(s) fire")
        return Report(lines: lines, exitCode: 0)
    }

    struct Problem: Error {
        var message: String
    }

    /// `NAME FIELD=VALUE …`, values typed as `eventbus post` types them.
    static func parse(_ text: String) -> Result<Event, Problem> {
        let words = text.split(whereSeparator: \.isWhitespace).map(String.init)
        guard let name = words.first else { return .failure(Problem(message: "--test-rules needs an event: NAME [FIELD=VALUE…]")) }
        do { try EventPattern.validate(eventName: name) } catch {
            return .failure(Problem(message: "--test-rules: \(HostConfig.message(of: error))"))
        }
        var fields: [String: FieldValue] = [:]
        for word in words.dropFirst() {
            guard let equals = word.firstIndex(of: "="), equals != word.startIndex else {
                return .failure(Problem(message: "--test-rules: \"\(word)\" is not FIELD=VALUE"))
            }
            let value = String(word[word.index(after: equals)...])
            let typed: FieldValue
            if let int = Int64(value) { typed = .int(int) } else if value == "true" || value == "false" { typed = .bool(value == "true") } else { typed = .string(value) }
            fields[String(word[..<equals])] = typed
        }
        return .success(Event(name: name, source: "user", fields: fields))
    }

    private static func describe(_ op: RuleOperator) -> String {
        switch op {
        case .debounce(let interval): return "debounce \(interval)"
        case .throttle(let interval): return "throttle \(interval)"
        case .distinct(let fields): return "distinct on \(fields.joined(separator: ", "))"
        case .collect(let count, let window):
            return "collect " + [count.map { "\($0) events" }, window.map { "\($0)" }].compactMap { $0 }.joined(separator: " or ")
        }
    }

    private static func describe(_ action: RuleAction, rule: String, trigger: RuleTriggerEvents, launcher: RulesLauncherChoice) -> String {
        switch action {
        case .run(let run):
            do {
                let spec = try RuleCommand.spec(for: run, rule: rule, run: "RUN", trigger: trigger)
                var text = "run " + spec.argv.map(quoted).joined(separator: " ")
                var notes: [String] = []
                if let user = spec.user { notes.append("user \(user)") }
                if let timeout = spec.timeout { notes.append("timeout \(timeout)") }
                if !run.environment.isEmpty {
                    notes.append("environment " + run.environment.keys.sorted().map { "\($0)=\(quoted(spec.environment[$0] ?? ""))" }.joined(separator: " "))
                }
                if !spec.unitProperties.isEmpty { notes.append("properties " + spec.unitProperties.map { "\($0.name)=\($0.value)" }.joined(separator: " ")) }
                notes.append("launcher \(launcher.rawValue)")
                text += " (" + notes.joined(separator: "; ") + ")"
                return text
            } catch {
                return "run: would fail: \(error.reason)"
            }
        case .webhook(let webhook):
            return "webhook \(webhook.method) \(webhook.url.expand(trigger))\(webhook.body == nil ? " with the event as JSON" : " with body \(quoted(webhook.body!.expand(trigger)))")"
        case .post(let name, let fields):
            return "post \(name.expand(trigger))" + fields.keys.sorted().map { " \($0)=\(quoted(fields[$0]!.expand(trigger)))" }.joined()
        case .log(let level, let message):
            return "log \(level.rawValue): \(message.expand(trigger))"
        }
    }

    /// JSON-style quoting, so an argument's start and end are plain to see.
    static func quoted(_ text: String) -> String {
        var result = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": result += "\\\""
            case "\\": result += "\\\\"
            case "\n": result += "\\n"
            case "\t": result += "\\t"
            case _ where scalar.value < 0x20: result += String(format: "\\u%04x", scalar.value)
            default: result.unicodeScalars.append(scalar)
            }
        }
        return result + "\""
    }
}
