@testable import EventBusHost
import EventBusKit
import Foundation
import Testing

/// `rules:` in the config and in `rules.d/*.yaml`: plain values from a good file, every mistake
/// at its file, line and key.
@Suite struct RuleConfigTests {
    func load(_ yaml: String, dropIns: [String: String] = [:]) throws -> (HostConfig?, ConfigError?, TemporaryDirectory) {
        let directory = try TemporaryDirectory()
        let file = try directory.write("eventbus.yaml", yaml)
        if !dropIns.isEmpty {
            try FileManager.default.createDirectory(atPath: directory.path + "/rules.d", withIntermediateDirectories: true)
            for (name, text) in dropIns { _ = try directory.write("rules.d/\(name)", text) }
        }
        do {
            return (try HostConfig.load(from: file), nil, directory)
        } catch {
            return (nil, error, directory)
        }
    }

    @Test func aFullRuleBecomesPlainValuesWithItsOperatorsInTheOrderWritten() throws {
        let (config, error, _) = try load("""
            rules:
              - name: reload-nginx
                on: [fs.closed, fs.moved_to]
                where: { path: "/etc/nginx/*.conf", size: ">0" }
                throttle: 10s
                debounce: 2s
                distinct: path
                mode: queued
                max: 3
                run: ["/bin/true", "{{path}}"]
                timeout: 30s
                user: nobody
                environment: { REASON: "{{event.name}}" }
            """)
        let rule = try #require(config?.rules.first, "\(String(describing: error))")
        #expect(rule.name == "reload-nginx")
        #expect(rule.trigger.patterns.map(\.description) == ["fs.closed", "fs.moved_to"])
        #expect(rule.operators == [.throttle(.seconds(10)), .debounce(.seconds(2)), .distinct(["path"])])
        #expect(rule.mode == .queued(max: 3))
        guard case .run(let run) = rule.actions.first else { Issue.record("not a run action"); return }
        #expect(run.argv.map(\.description) == ["/bin/true", "{{path}}"])
        #expect(run.timeout == .seconds(30))
        #expect(run.user == "nobody")
        #expect(rule.location.hasSuffix("eventbus.yaml:2"))
        #expect(rule.conditions.accepts(Event(name: "fs.closed", fields: ["path": "/etc/nginx/a.conf", "size": 3])))
        #expect(!rule.conditions.accepts(Event(name: "fs.closed", fields: ["path": "/etc/nginx/a.conf", "size": 0])))
        #expect(!rule.conditions.accepts(Event(name: "fs.closed", fields: ["path": "/etc/other.conf", "size": 3])))
    }

    @Test func thenAllOfCollectWebhookPostAndLogParse() throws {
        let (config, error, _) = try load("""
            rules:
              - name: disk-and-backup
                all_of: [user.disk.full, unit.failed]
                within: 10m
                collect: { count: 5, window: 1m }
                then:
                  - post: { name: alert.combined, fields: { mount: "{{mount}}" } }
                  - log: { level: warning, message: "both seen: {{event.count}}" }
                  - webhook: { url: "http://127.0.0.1:9/hook", headers: { X-Token: abc }, attempts: 3 }
            """)
        let rule = try #require(config?.rules.first, "\(String(describing: error))")
        #expect(rule.trigger == .allOf(try [EventPattern("user.disk.full"), EventPattern("unit.failed")], within: .seconds(600)))
        #expect(rule.operators == [.collect(count: 5, window: .seconds(60))])
        #expect(rule.actions.map(\.kind) == ["post", "log", "webhook"])
    }

    @Test func mistakesNameFileLineAndKeyEveryOneOfThem() throws {
        let (_, error, _) = try load("""
            rules:
              - name: a
                on: "fs.*x"
                run: ["/bin/true"]
              - name: b
                on: fs.closed
                run: "systemctl reload nginx"
              - name: c
                on: fs.closed
                run: ["relative/prog"]
              - name: d
                on: fs.closed
                run: ["/nonexistent/prog"]
              - name: e
                on: fs.closed
                mode: single
                max: 2
                log: hi
              - name: f
                on: fs.closed
                debounce: soon
                log: hi
              - name: g
                on: fs.closed
                log: hi
                post: x.y
              - name: h
                on: fs.closed
                run: "echo {{path}}"
                shell: true
              - name: i
                all_of: [a.b, c.d]
                log: hi
              - name: "bad name!"
                on: x
                log: hi
              - name: j
                on: x
                where: { n: ">= ninety" }
                log: hi
              - name: k
                on: x
                run: ["/dev/null"]
            """)
        let problems = try #require(error).all
        let byLine = Dictionary(problems.map { ($0.line ?? 0, $0) }, uniquingKeysWith: { first, _ in first })
        #expect(byLine[3]?.message.contains("mixes a wildcard") == true, "\(problems)")
        #expect(byLine[7]?.message.contains("shell: true") == true)
        #expect(byLine[10]?.message.contains("absolute path") == true)
        #expect(byLine[13]?.message.contains("No such file") == true)
        #expect(byLine[17]?.key == "rules[4].max")
        #expect(byLine[21]?.message.contains("duration") == true)
        #expect(problems.contains { $0.message.contains("one action each") })
        #expect(byLine[29]?.message.contains("takes no {{field}}") == true, "\(problems)")
        #expect(problems.contains { $0.message.contains("all_of needs within") })
        #expect(problems.contains { $0.key == "rules[9].name" })
        #expect(problems.contains { $0.message.contains("no number follows") })
        #expect(problems.contains { $0.message.contains("/dev/null is not a regular file") })
        #expect(problems.allSatisfy { $0.file.hasSuffix("eventbus.yaml") })
    }

    @Test func dropInsAreReadInNameOrderAndTheirMistakesNameTheirFile() throws {
        let (config, error, directory) = try load("rules:\n  - { name: main, on: x, log: hi }\n", dropIns: [
            "20-b.yaml": "rules:\n  - { name: second, on: y, log: hi }\n",
            "10-a.yaml": "rules:\n  - { name: first, on: z, log: hi }\n",
            "notes.txt": "not read",
        ])
        #expect(error == nil, "\(String(describing: error))")
        #expect(config?.rules.map(\.name) == ["main", "first", "second"])
        #expect(config?.ruleFiles == [directory.path + "/rules.d/10-a.yaml", directory.path + "/rules.d/20-b.yaml"])

        let (_, bad, badDirectory) = try load("rules:\n  - { name: same, on: x, log: hi }\n", dropIns: [
            "10-a.yaml": "rules:\n  - { name: same, on: y, log: hi }\n",
            "20-b.yaml": "rules:\n  - name: broken\n    on: y\n",
            "30-c.yaml": "other: 1\n",
        ])
        let problems = try #require(bad).all
        #expect(problems.contains { $0.file == badDirectory.path + "/rules.d/20-b.yaml" && $0.line == 2 && $0.message.contains("needs an action") }, "\(problems)")
        #expect(problems.contains { $0.file == badDirectory.path + "/rules.d/30-c.yaml" && $0.message.contains("unknown key") })
        #expect(problems.contains { $0.file == badDirectory.path + "/rules.d/10-a.yaml" && $0.message.contains("already named \"same\"") })
    }

    @Test func aProgramWithoutExecutePermissionIsRefused() throws {
        let directory = try TemporaryDirectory()
        let program = try directory.write("script", "#!/bin/sh\n")
        chmod(program, 0o644)
        let file = try directory.write("eventbus.yaml", "rules:\n  - name: a\n    on: x\n    run: [\"\(program)\"]\n")
        do {
            _ = try HostConfig.load(from: file)
            Issue.record("loaded")
        } catch {
            #expect(error.line == 4)
            #expect(error.message == "\(program) is not executable")
        }
    }

    @Test func aDropInOthersMayWriteIsRefused() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.write("eventbus.yaml", "sources: {}\n")
        try FileManager.default.createDirectory(atPath: directory.path + "/rules.d", withIntermediateDirectories: true)
        let dropIn = try directory.write("rules.d/open.yaml", "rules:\n  - { name: a, on: x, log: hi }\n")
        chmod(dropIn, 0o666)
        #expect(throws: ConfigError.self) { try HostConfig.load(from: file) }
        do { _ = try HostConfig.load(from: file) } catch {
            #expect(error.file == dropIn)
            #expect(error.message.contains("refused"), "\(error)")
        }
    }
}
