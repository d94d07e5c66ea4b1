@_spi(EventBusHost) import EventBusKit
import Foundation
import RuleActions

/// Puts every step of every rule on the record, as bus events from source `rules`, so that
/// `eventbus tail 'rule.>' 'action.>'` is the audit trail:
///
/// | event | when | fields |
/// |---|---|---|
/// | `rule.fired` | a trigger came out of the rule's operators | rule, trigger_seq, trigger_name, events |
/// | `rule.skipped` | its mode did not run a trigger, or its mailbox dropped events | rule, mode, reason, trigger_seq or dropped |
/// | `action.started` | a command or webhook began | rule, run, action, kind, trigger_seq, pid / unit / url |
/// | `action.finished` | an action ran to its end | rule, run, action, kind, outcome, exit_status / signal / http_status, duration_ms, output |
/// | `action.failed` | an action could not run or was given up | rule, run, action, kind, reason |
///
/// Posting is thread-safe; records come from the rule's queue and from its runs' tasks.
struct RuleRecorder: Sendable {
    static let source = "rules"
    /// The most bytes of output an `action.finished` carries.
    static let maximumOutputBytes = 4096

    let bus: Bus

    func fired(rule: String, trigger: RuleTriggerEvents) {
        post("rule.fired", [
            "rule": .string(rule), "trigger_seq": .int(Int64(trigger.last.sequence)),
            "trigger_name": .string(trigger.last.name), "events": .int(Int64(trigger.events.count)),
        ])
    }

    func skipped(rule: String, mode: RuleMode, reason: String, trigger: RuleTriggerEvents?, dropped: Int? = nil) {
        var fields: [String: FieldValue] = ["rule": .string(rule), "mode": .string(mode.name), "reason": .string(reason)]
        if let trigger { fields["trigger_seq"] = .int(Int64(trigger.last.sequence)) }
        if let dropped { fields["dropped"] = .int(Int64(dropped)) }
        post("rule.skipped", fields)
    }

    func started(_ step: RuleStep, details: [String: FieldValue]) {
        post("action.started", step.fields.merging(details) { $1 })
    }

    func finished(_ step: RuleStep, details: [String: FieldValue], duration: Duration, output: [String] = []) {
        var fields = step.fields.merging(details) { $1 }
        fields["duration_ms"] = .double(duration.secondsValue * 1000)
        if !output.isEmpty {
            var text = output.joined(separator: "\n")
            if text.utf8.count > Self.maximumOutputBytes {
                text = String(decoding: text.utf8.suffix(Self.maximumOutputBytes), as: UTF8.self)
            }
            fields["output"] = .string(text)
        }
        post("action.finished", fields)
    }

    func failed(_ step: RuleStep, reason: String) {
        post("action.failed", step.fields.merging(["reason": .string(reason)]) { $1 })
    }

    private func post(_ name: String, _ fields: [String: FieldValue]) {
        bus.post(Event(name: name, source: Self.source, fields: fields))
    }
}

/// Which action of which run a record is about.
struct RuleStep: Sendable {
    var rule: String
    var run: String
    /// 1-based, in the order of `then:`.
    var action: Int
    var kind: String
    var trigger: UInt64

    var fields: [String: FieldValue] {
        ["rule": .string(rule), "run": .string(run), "action": .int(Int64(action)), "kind": .string(kind),
         "trigger_seq": .int(Int64(trigger))]
    }
}
