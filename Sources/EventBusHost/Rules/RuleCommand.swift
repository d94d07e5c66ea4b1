import ControlProtocol
import EventBusKit
import RuleActions

/// Turns a `run:` action and its trigger into the exact command to start. Pure, so what a field
/// value can and cannot do to a command is tested without running anything:
/// - each configured argv element becomes exactly one argument, whatever its template expands
///   to — spaces, quotes, `;`, `$( )`, newlines and `{{` are text, never split or read again;
/// - nothing reaches a shell unless the rule wrote `shell: true`, and a shell line takes no
///   templates (the parser refuses them): fields reach it only as `$EVENTBUS_FIELD_*`;
/// - a NUL byte cannot be passed in an argument or variable, so an expansion holding one makes
///   the run fail with that reason instead of running a cut-short argument.
enum RuleCommand {
    /// A field value larger than this is left out of the environment (it is whole on standard
    /// input): Linux refuses a single variable over 128 KiB, and the whole command over about a
    /// quarter of the stack limit.
    static let maximumVariableBytes = 32 * 1024

    struct Refusal: Error, Equatable {
        var reason: String
    }

    /// Without `user:`, the launcher's default: eventbusd's own user for a child process,
    /// `nobody` for a transient unit (never root unless the rule says so).
    static func spec(for action: RunAction, rule: String, run: String, trigger: RuleTriggerEvents) throws(Refusal) -> CommandSpec {
        var argv: [String] = []
        for (index, element) in action.argv.enumerated() {
            let text = element.expand(trigger)
            guard !text.utf8.contains(0) else {
                throw Refusal(reason: "argument \(index) (\(element.description)) expands to text holding a NUL byte, which no argument can carry")
            }
            argv.append(text)
        }
        var environment = variables(for: trigger, rule: rule, run: run)
        for (name, value) in action.environment {
            let text = value.expand(trigger)
            guard !text.utf8.contains(0) else {
                throw Refusal(reason: "environment \(name) expands to text holding a NUL byte, which no variable can carry")
            }
            environment[name] = text
        }
        return CommandSpec(argv: argv, environment: environment, standardInput: standardInput(for: trigger),
                           user: action.user, group: action.group, workingDirectory: action.workingDirectory,
                           timeout: action.timeout, unitProperties: action.properties, unitName: unitName(rule: rule, run: run))
    }

    /// `eventbus-rule-RULE-RUN.service`: rule names and run ids are already unit-name characters.
    static func unitName(rule: String, run: String) -> String {
        "eventbus-rule-\(rule)-\(run).service"
    }

    /// `EVENTBUS_EVENT` (the name), `EVENTBUS_SEQ`, `EVENTBUS_SOURCE`, `EVENTBUS_COUNT`,
    /// `EVENTBUS_RULE`, `EVENTBUS_RUN` and `EVENTBUS_FIELD_<NAME>` per field of the last event:
    /// the name upper-cased, every character but letters and digits made `_`.
    static func variables(for trigger: RuleTriggerEvents, rule: String, run: String) -> [String: String] {
        let event = trigger.last
        var variables = [
            "EVENTBUS_EVENT": event.name, "EVENTBUS_SEQ": String(event.sequence), "EVENTBUS_SOURCE": event.source,
            "EVENTBUS_COUNT": String(trigger.events.count), "EVENTBUS_RULE": rule, "EVENTBUS_RUN": run,
        ]
        for (name, value) in event.fields {
            let text = value.description
            guard text.utf8.count <= maximumVariableBytes, !text.utf8.contains(0) else { continue }
            variables["EVENTBUS_FIELD_" + variableName(name)] = text
        }
        return variables
    }

    static func variableName(_ field: String) -> String {
        String(String.UnicodeScalarView(field.uppercased().unicodeScalars.map { scalar in
            scalar.isASCII && (scalar.properties.isAlphabetic || ("0"..."9").contains(scalar)) ? scalar : "_"
        }))
    }

    /// The triggering events as JSON lines, the same lines as `eventbus tail --json`.
    static func standardInput(for trigger: RuleTriggerEvents) -> [UInt8] {
        var encoder = EventJSON()
        var writer = JSONWriter()
        for event in trigger.events { encoder.event(event, into: &writer) }
        return writer.bytes
    }
}
