import EventBusHost
import EventBusKit
import Foundation
import Testing

/// Config errors name file, line and key; a valid file becomes plain values.
@Suite struct ConfigTests {
    /// Writes `yaml` to a private temp file and loads it; returns the error it must raise.
    func error(in yaml: String) throws -> ConfigError {
        let directory = try TemporaryDirectory()
        let file = try directory.write("eventbus.yaml", yaml)
        do {
            _ = try HostConfig.load(from: file)
        } catch {
            #expect(error.file == file)
            return error
        }
        Issue.record("config loaded without error:\n\(yaml)")
        return ConfigError(file: "", line: nil, key: "", message: "")
    }

    @Test func aPathThatIsNotAStringNamesFileLineAndKey() throws {
        let error = try error(in: """
            shutdown_timeout: 5s
            modules:
              hello:
                path: 12
            """)
        #expect(error.line == 4)
        #expect(error.key == "modules.hello.path")
        #expect(error.description == "\(error.file):4: modules.hello.path: expected a string, found 12")
    }

    @Test func everyBadSectionAndModuleIsReportedNotOnlyTheFirst() throws {
        let error = try error(in: """
            shutdown_timeout: soon
            modules:
              a:
                path: 12
              good:
                path: /x/libGood.so
              b:
                path: /x/libB.so
                greting: hello
            control:
              client_buffer: 0
            """)
        #expect(error.all.map { "\($0.line ?? 0) \($0.key)" } == ["1 shutdown_timeout", "4 modules.a.path", "9 modules.b.greting", "11 control.client_buffer"],
                "\(error)")
        #expect(error.description.split(separator: "\n").count == 4)
        #expect(error.description.hasPrefix(error.file + ":1: shutdown_timeout: "), "\(error)")
    }

    @Test func anUnknownKeyIsAnErrorNotIgnored() throws {
        let error = try error(in: """
            modules: {}
            shutdown_timout: 5s
            """)
        #expect(error.line == 2)
        #expect(error.key == "shutdown_timout")
        #expect(error.message.contains("unknown key"))
        #expect(error.message.contains("shutdown_timeout"))
    }

    @Test func aBadTimerIntervalPointsAtTheListItem() throws {
        let error = try error(in: """
            sources:
              timers:
                - name: ok
                  every: 1s
                - name: broken
                  every: fast
            """)
        #expect(error.line == 6)
        #expect(error.key == "sources.timers[1].every")
        #expect(error.message.contains("expected a duration"))
    }

    @Test func aTimerIntervalTheSDKRefusesIsReportedAtItsKey() throws {
        let error = try error(in: """
            sources:
              timers:
                - name: tiny
                  every: 10us
            """)
        #expect(error.line == 4)
        #expect(error.key == "sources.timers[0].every")
        #expect(error.message.contains("1 ms"))
    }

    @Test func aTimerNeedsExactlyOneSchedule() throws {
        let both = try error(in: """
            sources:
              timers:
                - name: t
                  every: 1s
                  calendar: "*-*-* 03:00"
            """)
        #expect(both.line == 3)
        #expect(both.key == "sources.timers[0]")
        #expect(both.message.contains("not both"))
        let neither = try error(in: """
            sources:
              timers:
                - name: t
            """)
        #expect(neither.message.contains("needs every"))
    }

    @Test func duplicateTimerNamesAreRefusedAndEqualSchedulesAreTwoTimers() throws {
        let names = try error(in: """
            sources:
              timers:
                - {name: a, every: 1s}
                - {name: a, every: 2s}
            """)
        #expect(names.line == 4)
        #expect(names.key == "sources.timers[1].name")
        // Named apart, their ticks say which fired: two timers, not one shared source.
        let directory = try TemporaryDirectory()
        let config = try HostConfig.load(from: try directory.write("eventbus.yaml", """
            sources:
              timers:
                - {name: backup, calendar: "*-*-* 03:00"}
                - {name: report, calendar: "*-*-* 03:00"}
            """))
        #expect(config.timers.map(\.name) == ["backup", "report"])
    }

    @Test func invalidYAMLNamesTheLine() throws {
        let error = try error(in: """
            modules:
              hello:
                path: "unterminated
            """)
        #expect(error.line != nil)
        #expect(error.message.contains("YAML"))
    }

    @Test func duplicateKeysAreRefused() throws {
        let error = try error(in: """
            modules:
              hello:
                path: a.so
              hello:
                path: b.so
            """)
        #expect(error.message.contains("duplicate key \"hello\""))
        #expect(error.line != nil)
    }

    @Test func rangeAndTypeErrorsInNestedSections() throws {
        let capacity = try error(in: "module_mailbox_capacity: 0\n")
        #expect(capacity.description.hasSuffix(":1: module_mailbox_capacity: must be at least 1, found 0"))
        let bytes = try error(in: "module_mailbox_bytes: lots\n")
        #expect(bytes.description.hasSuffix(":1: module_mailbox_bytes: expected a size such as 64MiB, 16 MB or 1048576 (bytes), found \"lots\""), "\(bytes)")
        let enabled = try error(in: """
            modules:
              hello:
                path: hello.so
                enabled: maybe
            """)
        #expect(enabled.key == "modules.hello.enabled")
        #expect(enabled.line == 4)
        let null = try error(in: """
            modules:
              hello:
                path: hello.so
                config:
                  greeting:
            """)
        #expect(null.key == "modules.hello.config.greeting")
        #expect(null.message.contains("null"))
        let missing = try error(in: """
            modules:
              hello:
                enabled: true
            """)
        #expect(missing.key == "modules.hello")
        #expect(missing.message.contains("needs a path"))
        let topLevel = try error(in: "- a\n- b\n")
        #expect(topLevel.line == 1)
        #expect(topLevel.message.contains("expected a mapping, found a list"))
    }

    /// YAML aliases can make a few lines stand for billions of values: a module's config is
    /// refused once it expands past its bound, quickly, instead of being built. Aliases within the
    /// bound are expanded as the values they name.
    @Test func aModuleConfigThatAliasesExpandPastItsBoundIsRefused() throws {
        var yaml = "modules:\n  m:\n    path: /x.so\n    config:\n      l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n"
        for level in 1...8 {
            yaml += "      l\(level): &l\(level) [" + Array(repeating: "*l\(level - 1)", count: 10).joined(separator: ", ") + "]\n"
        }
        let error = try error(in: yaml)
        #expect(error.key == "modules.m.config")
        #expect(error.message == "expands to more than 100000 values or 16MiB of text (YAML aliases are expanded); a module's config must stay within that")

        // Text counts too: 64 aliases of a 1 MiB string.
        let long = String(repeating: "y", count: 1 << 20)
        let wide = "modules:\n  m:\n    path: /x.so\n    config:\n      s: &s \(long)\n      many: [" + Array(repeating: "*s", count: 64).joined(separator: ", ") + "]\n"
        #expect(try self.error(in: wide).key == "modules.m.config")

        let directory = try TemporaryDirectory()
        let shared = try HostConfig.load(from: directory.write("eventbus.yaml", """
            modules:
              m:
                path: /x.so
                config:
                  base: &base {retries: 3, hosts: [a, b]}
                  copy: *base
            """))
        #expect(shared.modules[0].config.values["copy"] == .table(["retries": .int(3), "hosts": .array([.string("a"), .string("b")])]))
    }

    @Test func aMissingFileSaysSo() {
        #expect(throws: ConfigError.self) { try HostConfig.load(from: "/nonexistent/eventbus.yaml") }
        do {
            _ = try HostConfig.load(from: "/nonexistent/eventbus.yaml")
        } catch {
            #expect(error.description == "/nonexistent/eventbus.yaml: cannot read the config file: No such file or directory")
        }
    }

    @Test func aValidConfigBecomesPlainValues() throws {
        let directory = try TemporaryDirectory()
        let file = try directory.write("eventbus.yaml", """
            module_mailbox_capacity: 500
            module_mailbox_bytes: 8MiB
            shutdown_timeout: 1.5s
            sources:
              timers:
                - name: heartbeat
                  every: 30s
                  tolerance: 100ms
                - name: nightly
                  calendar: "*-*-* 03:00"
                  missed_runs: skip
            modules:
              hello:
                path: modules/libHello.so
                config:
                  greeting: hi
                  times: 3
                  ratio: 0.5
                  loud: true
                  tags: [a, b]
                  nested: {x: 1}
              other:
                path: /opt/other.so
                enabled: false
                mailbox_capacity: 7
                mailbox_bytes: 100 KiB
            """)
        let config = try HostConfig.load(from: file)
        #expect(config.moduleMailbox == MailboxLimits(events: 500, bytes: 8 << 20))
        #expect(config.shutdownTimeout == .milliseconds(1500))
        #expect(config.timers.map(\.name) == ["heartbeat", "nightly"])
        #expect(config.timers[0].schedule == (try .every(.seconds(30), tolerance: .milliseconds(100))))
        #expect(config.timers[1].schedule.missedRuns == .skip)
        #expect(config.modules.map(\.name) == ["hello", "other"])
        let hello = config.modules[0]
        #expect(hello.path == directory.path + "/modules/libHello.so")  // relative to the config
        #expect(hello.enabled)
        #expect(hello.location == "\(file):14")
        #expect(hello.config == ModuleConfig([
            "greeting": .string("hi"), "times": .int(3), "ratio": .double(0.5), "loud": .bool(true),
            "tags": .array([.string("a"), .string("b")]), "nested": .table(["x": .int(1)]),
        ]))
        #expect(config.modules[1].path == "/opt/other.so")
        #expect(!config.modules[1].enabled)
        #expect(config.modules[1].mailboxCapacity == 7)
        #expect(config.modules[1].mailboxBytes == 102_400)
        #expect(hello.mailboxLimits(default: config.moduleMailbox) == MailboxLimits(events: 500, bytes: 8 << 20))
        #expect(config.modules[1].mailboxLimits(default: config.moduleMailbox) == MailboxLimits(events: 7, bytes: 102_400))
    }

    @Test func controlLimitsAndAccessKeys() throws {
        let directory = try TemporaryDirectory()
        let config = try HostConfig.load(from: try directory.write("eventbus.yaml", """
            control:
              max_clients: 100
              max_clients_per_user: 5
              files_access: tail_group
              journal_groups: [adm]
            """))
        #expect(config.control.maxClients == 100)
        #expect(config.control.maxClientsPerUser == 5)
        #expect(config.control.filesAccess == .tailGroup)
        #expect(config.control.journalGroups == ["adm"])
        let defaults = ControlSettings()
        #expect(defaults.filesAccess == .caller && defaults.journalGroups == ["systemd-journal", "adm"])
        let bad = try error(in: "control:\n  files_access: everyone\n")
        #expect(bad.line == 2)
        #expect(bad.message.contains("must be caller (the client's own permissions decide) or tail_group"), "\(bad.message)")
        #expect(try error(in: "control:\n  max_clients_per_user: 0\n").line == 2)
    }

    @Test func anEmptyFileIsAnEmptyConfig() throws {
        let directory = try TemporaryDirectory()
        let config = try HostConfig.load(from: try directory.write("eventbus.yaml", "# nothing yet\n"))
        #expect(config.modules.isEmpty && config.timers.isEmpty)
        #expect(config.shutdownTimeout == HostConfig.defaultShutdownTimeout)
    }
}

/// The example config in the repo stays valid.
@Suite struct ExampleConfigTests {
    @Test func theExampleConfigParses() throws {
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let config = try HostConfig.load(from: repository.appendingPathComponent("examples/eventbus.yaml").path)
        #expect(config.timers.map(\.name) == ["heartbeat", "nightly"])
        #expect(config.modules.map(\.name) == ["hello", "follower", "rate-summary"])
        // `.build/release` is a symlink once a release build exists; the path may resolve through it.
        #expect(config.modules.allSatisfy { $0.path.hasPrefix(repository.path + "/.build/") && $0.path.hasSuffix(".so") })
        #expect(config.watches.map(\.name) == ["examples", "ssh-warnings"])
    }
}

/// The isolation keys: `isolation`, `worker`, `module_isolation`.
@Suite struct IsolationConfigTests {
    func load(_ yaml: String) throws -> HostConfig {
        let directory = try TemporaryDirectory()
        return try HostConfig.load(from: try directory.write("eventbus.yaml", yaml))
    }

    @Test func processIsTheDefaultAndTheHostWideKeyAndTheEntryOverrideIt() throws {
        let config = try load("""
            module_isolation: none
            modules:
              a: {path: /x/a.so}
              b: {path: /x/b.so, isolation: process, worker: {heartbeat_timeout: 2s, start_limit_burst: 3, memory_limit: 512M, cpu_limit: 1m, open_files: 256}}
            """)
        #expect(config.modules[0].isolation == .none)
        #expect(config.modules[1].isolation == .process)
        #expect(config.modules[1].worker.heartbeatTimeout == .seconds(2))
        #expect(config.modules[1].worker.startLimitBurst == 3)
        #expect(config.modules[1].worker.memoryLimit == 512 << 20)
        #expect(config.modules[1].worker.cpuLimitSeconds == 60)
        #expect(config.modules[1].worker.openFilesLimit == 256)
        #expect(try load("modules:\n  a: {path: /x/a.so}\n").modules[0].isolation == .process)
    }

    @Test func badIsolationKeysNameFileLineAndKey() throws {
        for (yaml, key, message) in [
            ("modules:\n  a:\n    path: /x.so\n    isolation: thread\n", "modules.a.isolation", "expected one of: process, none, found \"thread\""),
            ("modules:\n  a:\n    path: /x.so\n    worker: {memory_limit: lots}\n", "modules.a.worker.memory_limit", "expected a size such as 64MiB, 16 MB or 1048576 (bytes), found \"lots\""),
            ("modules:\n  a:\n    path: /x.so\n    worker: {restarts: 3}\n", "modules.a.worker.restarts", "unknown key"),
            ("modules:\n  a:\n    path: /x.so\n    worker: {restart_delay: 1m}\n", "modules.a.worker.restart_delay", "must be at most 30.0 seconds"),
        ] {
            do {
                let directory = try TemporaryDirectory()
                _ = try HostConfig.load(from: try directory.write("eventbus.yaml", yaml))
                Issue.record("accepted: \(yaml)")
            } catch let error as ConfigError {
                #expect(error.key == key)
                #expect(error.line == 4)
                #expect(error.message.hasPrefix(message), "\(error)")
            }
        }
    }
}
