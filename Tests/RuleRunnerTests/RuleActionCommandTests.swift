import ControlProtocol
@testable import EventBusHost
@_spi(EventBusHost) import EventBusKit
import Foundation
import RuleActions
import RuleRunnerProtocol
import TestSupport
import Testing

/// What the runner builds from the config for a request: the very command the rule engine
/// builds for the same events, or a clear refusal for a rule or action that is not there.
@Suite struct RuleActionCommandTests {
    static let yaml = """
        rules:
          - name: reload-web
            on: deploy.*
            where: { path: "/srv/*" }
            then:
              - log: "deploying {{path}}"
              - run: ["/usr/bin/touch", "{{path}}", "{{event.name}}-{{event.seq}}"]
                user: www-data
                environment: { WHY: "{{reason}}" }
                properties: { MemoryMax: 64M }
          - name: paused
            on: deploy.*
            enabled: false
            run: ["/bin/true"]
        """

    func config() throws -> (HostConfig, TemporaryDirectory) {
        let directory = try TemporaryDirectory()
        let file = try directory.write("eventbus.yaml", Self.yaml)
        return (try HostConfig.load(from: file), directory)
    }

    /// The lines the engine hands a command (and the client forwards), as objects.
    static func lines(_ trigger: RuleTriggerEvents) throws -> [JSON] {
        try RuleCommand.standardInput(for: trigger).split(separator: 10).map { line in
            try Array(line).withUnsafeBufferPointer { try JSON.parse($0) }
        }
    }

    @Test func theCommandIsTheEnginesForTheSameEvents() throws {
        let (config, _) = try config()
        let events = [Event(name: "deploy.start", fields: ["path": "/srv/a"]).withSequence(41),
                      Event(name: "deploy.done", fields: ["path": "/srv/a b; rm -rf ~", "reason": "$(id)", "n": 3, "ok": true, "x": 1.5,
                                                                 "fired": .date(Date(timeIntervalSince1970: 1_790_000_000.25))])
                          .withSequence(42)]
        let trigger = RuleTriggerEvents(events)
        let built = try config.ruleActionCommand(rule: "reload-web", action: 2, run: "ab12-7", events: Self.lines(trigger)).get()
        guard case .run(let action) = config.rules[0].actions[1] else { throw POSIXError(.EINVAL) }
        let engine = try RuleCommand.spec(for: action, rule: "reload-web", index: 2, run: "ab12-7", trigger: trigger)
        #expect(built == engine)
        #expect(built.argv == ["/usr/bin/touch", "/srv/a b; rm -rf ~", "deploy.done-42"])
        #expect(built.user == "www-data")
        #expect(built.unitProperties == [UnitProperty(name: "MemoryMax", value: "64M")])
        #expect(built.unitName == "eventbus-rule-reload-web-ab12-7.service")
        #expect(built.origin == CommandOrigin(rule: "reload-web", action: 2, run: "ab12-7"))
        #expect(built.standardInput == RuleCommand.standardInput(for: trigger))
    }

    @Test func anUnknownRuleADisabledOneAndAnActionThatIsNotARunAreRefused() throws {
        let (config, _) = try config()
        let events = try Self.lines(RuleTriggerEvents([Event(name: "deploy.done", fields: ["path": "/srv/x"])]))
        func code(_ rule: String, _ action: Int) -> RuleRunnerError.Code? {
            if case .failure(let error) = config.ruleActionCommand(rule: rule, action: action, run: "a-1", events: events) { error.code } else { nil }
        }
        #expect(code("no-such-rule", 1) == .noSuchRule)
        #expect(code("paused", 1) == .noSuchRule)
        #expect(code("reload-web", 1) == .notARunAction)  // the log: action
        #expect(code("reload-web", 3) == .notARunAction)
        #expect(code("reload-web", 0) == .notARunAction)
        #expect(code("reload-web", 2) == nil)
    }

    @Test(arguments: [
        ("not an object", JSON.string("x")),
        ("unknown member \"argv\"", ["type": "event", "seq": .int(1), "name": "a.b", "source": "user", "time": "2026-11-29T08:00:00.000000Z", "mono": .int(1), "fields": [:], "argv": ["/bin/sh"]]),
        ("\"type\"", ["type": "gap", "seq": .int(1), "name": "a.b", "source": "user", "time": "2026-11-29T08:00:00.000000Z", "mono": .int(1), "fields": [:]]),
        ("\"name\"", ["type": "event", "seq": .int(1), "name": "a..b", "source": "user", "time": "2026-11-29T08:00:00.000000Z", "mono": .int(1), "fields": [:]]),
        ("\"seq\"", ["type": "event", "seq": .int(-1), "name": "a.b", "source": "user", "time": "2026-11-29T08:00:00.000000Z", "mono": .int(1), "fields": [:]]),
        ("\"time\"", ["type": "event", "seq": .int(1), "name": "a.b", "source": "user", "time": "yesterday", "mono": .int(1), "fields": [:]]),
        ("field \"f\"", ["type": "event", "seq": .int(1), "name": "a.b", "source": "user", "time": "2026-11-29T08:00:00.000000Z", "mono": .int(1), "fields": ["f": ["nested": .int(1)]]]),
    ] as [(String, JSON)])
    func aForgedEventThatIsNotAnEventLineIsRefused(_ says: String, _ event: JSON) throws {
        let (config, _) = try config()
        guard case .failure(let error) = config.ruleActionCommand(rule: "reload-web", action: 2, run: "a-1", events: [event]) else {
            Issue.record("accepted")
            return
        }
        #expect(error.code == .badEvent)
        #expect(error.message.contains(says) || (says == "not an object" && error.message.contains("an object")), "\(error.message)")
    }

    @Test func anEventTheRuleWouldNotTakeIsRefused() throws {
        let (config, _) = try config()
        for event in [Event(name: "other.thing", fields: ["path": "/srv/a"]), Event(name: "deploy.done", fields: ["path": "/etc/shadow"])] {
            let lines = try Self.lines(RuleTriggerEvents([event]))
            guard case .failure(let error) = config.ruleActionCommand(rule: "reload-web", action: 2, run: "a-1", events: lines) else {
                Issue.record("accepted \(event)")
                continue
            }
            #expect(error.code == .badEvent)
            #expect(error.message.contains("is not one rule \"reload-web\" takes"), "\(error.message)")
        }
    }

    @Test func aFieldHoldingANulByteIsARefusedCommand() throws {
        let (config, _) = try config()
        let events = try Self.lines(RuleTriggerEvents([Event(name: "deploy.done", fields: ["path": "/srv/a\u{0}b"])]))
        guard case .failure(let error) = config.ruleActionCommand(rule: "reload-web", action: 2, run: "a-1", events: events) else {
            Issue.record("accepted")
            return
        }
        #expect(error.code == .refusedCommand)
    }
}
