import EventBusHost
import EventBusKit
import EventSources
import Foundation
import Testing
import TestSupport

/// `sources.units`: a watch per item, errors with file, line and key.
@Suite struct UnitsConfigTests {
    private func load(_ yaml: String) throws -> HostConfig {
        let directory = try TemporaryDirectory()
        return try HostConfig.load(from: try directory.write("eventbus.yaml", yaml))
    }

    @Test func watchesTakeOnePatternOrAListAndAManager() throws {
        let config = try load("""
            sources:
              units:
                - name: web
                  units: ["nginx.service", "app-*.service"]
                - name: timers
                  units: "*.timer"
                  manager: user
                - name: container
                  units: "*"
                  manager: unix:path=/proc/1/root/run/systemd/private
            """)
        #expect(config.watches.map(\.name) == ["web", "timers", "container"])
        #expect(config.watches.map(\.source) == [
            ConfiguredSource(UnitWatch(match: .names("nginx.service", "app-*.service"))),
            ConfiguredSource(UnitWatch(match: .types("timer"), manager: .user)),
            ConfiguredSource(UnitWatch(match: .all, manager: .address("unix:path=/proc/1/root/run/systemd/private"))),
        ])
    }

    @Test func badWatchesNameFileLineAndKey() throws {
        for (yaml, line, key, message) in [
            ("sources:\n  units:\n    - name: web\n", 3, "sources.units[0]", "a units watch needs units"),
            ("sources:\n  units:\n    - name: web\n      units: \"nginx service\"\n", 4, "sources.units[0].units", "' ' occurs in no unit name"),
            ("sources:\n  units:\n    - name: web\n      units: []\n", 4, "sources.units[0].units", "at least one name pattern"),
            ("sources:\n  units:\n    - name: web\n      units: \"*\"\n      manager: session\n", 5, "sources.units[0].manager", "expected system, user or a D-Bus address"),
            ("sources:\n  units:\n    - name: web\n      units: \"*\"\n      every: 5s\n", 5, "sources.units[0].every", "unknown key; expected one of: name, units, manager"),
            ("sources:\n  units:\n    - name: web\n      units: \"*\"\n    - name: web\n      units: \"a.service\"\n", 5, "sources.units[1].name", "another watch is already named"),
        ] {
            let directory = try TemporaryDirectory()
            let file = try directory.write("eventbus.yaml", yaml)
            do {
                _ = try HostConfig.load(from: file)
                Issue.record("loaded without error:\n\(yaml)")
            } catch {
                #expect(error.file == file && error.line == line && error.key == key, "\(error)")
                #expect(error.message.contains(message), "\(error)")
            }
        }
    }
}
