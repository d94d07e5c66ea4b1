@testable import EventBusHost
import EventBusKit
import Foundation
import RuleActions
import Testing

/// What a field value can do to a command: nothing but be text in the one argument or variable
/// it was placed in.
@Suite struct RuleCommandTests {
    static let hostile: [String] = [
        "a b c", "'; rm -rf / #", "$(touch /tmp/pwned)", "`id`", "x\ny\nz", "--flag=1 --other", "{{path}}", "\"quoted\" 'x'",
        "*", "~root", "$HOME", String(repeating: "m", count: 1 << 20), "ünïcödé \u{202E}rtl", "",
    ]

    func spec(_ argv: [String], fields: [String: FieldValue]) throws -> CommandSpec {
        let action = RunAction(argv: try argv.map { (text) throws in try RuleTemplate(text) })
        return try RuleCommand.spec(for: action, rule: "r", run: "L-1", trigger: RuleTriggerEvents([Event(name: "x.y", fields: fields)]))
    }

    @Test(arguments: hostile)
    func aHostileValueIsExactlyOneArgument(value: String) throws {
        let command = try spec(["/bin/echo", "--path={{path}}", "{{path}}", "tail"], fields: ["path": .string(value)])
        #expect(command.argv == ["/bin/echo", "--path=" + value, value, "tail"])
        #expect(command.environment["EVENTBUS_FIELD_PATH"] == (value.utf8.count <= RuleCommand.maximumVariableBytes ? value : nil))
    }

    @Test func aNULByteRefusesTheRunInsteadOfCuttingTheArgument() throws {
        #expect(throws: RuleCommand.Refusal.self) { try spec(["/bin/echo", "{{v}}"], fields: ["v": "a\0b"]) }
        // Not placed in an argument: the run goes ahead, the variable is left out.
        let command = try spec(["/bin/echo"], fields: ["v": "a\0b"])
        #expect(command.environment["EVENTBUS_FIELD_V"] == nil)
    }

    @Test func variablesNameTheEventAndEveryField() throws {
        let command = try spec(["/bin/true"], fields: ["unit-name": "nginx.service", "n": 3, "ok": true])
        #expect(command.environment["EVENTBUS_EVENT"] == "x.y")
        #expect(command.environment["EVENTBUS_FIELD_UNIT_NAME"] == "nginx.service")
        #expect(command.environment["EVENTBUS_FIELD_N"] == "3")
        #expect(command.environment["EVENTBUS_FIELD_OK"] == "true")
        #expect(command.environment["EVENTBUS_RULE"] == "r")
        #expect(command.unitName == "eventbus-rule-r-L-1.service")
        let line = String(decoding: command.standardInput, as: UTF8.self)
        #expect(line.hasPrefix("{\"type\":\"event\"") && line.hasSuffix("\n"), "\(line)")
        #expect(line.contains("\"unit-name\":\"nginx.service\""))
    }

    @Test func templatesReadFieldsAndEventMembersAndRefuseUnclosedPlaceholders() throws {
        let template = try RuleTemplate("{{event.name}}#{{event.seq}}:{{ missing }}:{{n}}")
        #expect(template.expand(RuleTriggerEvents([Event(name: "a.b", fields: ["n": 4])])) == "a.b#0::4")
        #expect(throws: RuleTemplateError.self) { try RuleTemplate("{{open") }
        #expect(throws: RuleTemplateError.self) { try RuleTemplate("{{}}") }
    }

    @Test func allOfJoinsOneOfEachWithinTheWindowAndForgetsOlderOnes() throws {
        var join = AllOfJoin(patterns: [try EventPattern("disk.full"), try EventPattern("unit.failed")], within: .seconds(10))
        func event(_ name: String, at seconds: UInt64) -> Event {
            Event(name: name, monotonicNanoseconds: seconds * 1_000_000_000)
        }
        #expect(join.add(event("disk.full", at: 100)) == nil)
        // Eleven seconds later: the disk event has expired.
        #expect(join.add(event("unit.failed", at: 111)) == nil)
        #expect(join.add(event("disk.full", at: 115))?.map(\.name) == ["unit.failed", "disk.full"])
        // The join starts empty again.
        #expect(join.add(event("unit.failed", at: 116)) == nil)
    }

    @Test func theOutputTailKeepsTheLastLinesAndCutsLongOnes() {
        let tail = OutputTail(lines: 2)
        let text = "one\ntwo\n" + String(repeating: "x", count: 10_000) + "\nlast"
        Array(text.utf8).withUnsafeBytes { tail.append($0) }
        #expect(tail.lines.count == 2)
        #expect(tail.lines[0].hasSuffix("…") && tail.lines[0].utf8.count <= OutputTail.maximumLineBytes + 3)
        #expect(tail.lines[1] == "last")
    }
}
