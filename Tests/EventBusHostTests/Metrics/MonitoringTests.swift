import ControlProtocol
import Foundation
import Testing
import TestSupport

/// The Prometheus alert rules and the Grafana dashboard the package ships
/// (`packaging/monitoring`), held to the real tools: promtool checks the rules and runs their
/// unit tests; a real Prometheus loads the rules and evaluates them against a real eventbusd
/// with every kind of series (a module, timers, a files and a journal watch, a NATS bridge, a rule),
/// and answers every query of the dashboard; and every series they name is one eventbusd gives.
@Suite(.tags(.realDaemon, .nats), .skippable(.realDaemon, .nats)) struct MonitoringTests {
    static let folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path + "/packaging/monitoring"
    static let rules = folder + "/eventbus-alerts.yml"
    static let promtool = "/usr/bin/promtool"

    @Test func theAlertRulesPassPromtoolAndTheirUnitTests() async throws {
        guard FileManager.default.isExecutableFile(atPath: Self.promtool) else {
            print("skipped: \(Self.promtool) is not installed (Debian's prometheus package, installed by .ci/setup)")
            return
        }
        let check = try await run("/bin/sh", ["-c", "\(Self.promtool) check rules \(Self.rules) 2>&1"])
        #expect(check.status == 0 && check.output.contains("SUCCESS"), "\(check.output)")
        let tests = try await run("/bin/sh", ["-c", "cd \(Self.folder) && \(Self.promtool) test rules eventbus-alerts.test.yml 2>&1"])
        #expect(tests.status == 0 && tests.output.contains("SUCCESS"), "\(tests.output)")
    }

    /// The PromQL of the dashboard's panels and variables, with Grafana's variables filled in
    /// as Grafana would for "All".
    static func dashboardQueries() throws -> [String] {
        let data = try Data(contentsOf: URL(fileURLWithPath: folder + "/eventbus-dashboard.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        var queries: [String] = []
        for panel in dashboard["panels"] as? [[String: Any]] ?? [] {
            for target in panel["targets"] as? [[String: Any]] ?? [] {
                if let expr = target["expr"] as? String { queries.append(expr) }
            }
        }
        let variables = (dashboard["templating"] as? [String: Any])?["list"] as? [[String: Any]] ?? []
        for variable in variables {
            if let definition = variable["definition"] as? String, definition.hasPrefix("label_values(") {
                // label_values(SELECTOR, LABEL): the selector is the query that must find series.
                queries.append(String(definition.dropFirst("label_values(".count).prefix { $0 != "," }))
            }
        }
        return queries.map {
            $0.replacingOccurrences(of: "$__rate_interval", with: "1m").replacingOccurrences(of: "$instance", with: ".*")
                .replacingOccurrences(of: "$job", with: ".*")
        }
    }

    /// The `expr` of every rule (one line each in the file).
    static func ruleExpressions() throws -> [String] {
        try String(contentsOfFile: rules, encoding: .utf8).split(separator: "\n")
            .compactMap { line in line.trimmingCharacters(in: .whitespaces).hasPrefix("expr: ") ? String(line.split(separator: "expr: ", maxSplits: 1)[1]) : nil }
    }

    @Test(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"))
    func everySeriesTheyNameExistsAndARealPrometheusRunsEveryQuery() async throws {
        let queries = try Self.dashboardQueries()
        let expressions = try Self.ruleExpressions()
        try #require(queries.count >= 25 && expressions.count == 12, "\(queries.count) dashboard queries, \(expressions.count) rules")
        let directory = try TemporaryDirectory("monitoring")
        let nats = try NATSServer(storage: directory.path)
        for folder in ["watched", "journal"] {
            try FileManager.default.createDirectory(atPath: directory.path + "/" + folder, withIntermediateDirectories: true)
        }
        let host = try await MetricsDaemonTests.Host(more: """
            sources:
              timers:
                - {name: tick, every: 1s}
              files:
                - {name: watched, path: \(directory.path)/watched}
              journal:
                - {name: app, directory: \(directory.path)/journal}
            bridge:
              nats:
                servers: [\(nats.url)]
                host: monitored
                export: ["test.>"]
                import: ["remote.>"]
            rules:
              - {name: tick-log, on: timer.tick, throttle: 1m, log: tick}
            """)
        defer { Task { await host.stop() } }
        try postMany(host.socket, name: "test.tick", count: 5)

        // Every series named is one eventbusd writes (the files figures come from the second
        // scrape on: they are read between scrapes).
        let named = Set((queries + expressions).flatMap { query in
            query.matches(of: /\b(eventbus|process)_[a-z_]+/).map { String($0.output.0) }
        })
        var missing = named
        let scraped = await eventually {
            guard let text = try? host.scrape() else { return false }
            let written = Set(text.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { String($0.prefix { $0 != "{" && $0 != " " }) })
            missing = named.subtracting(written)
            return missing.isEmpty
        }
        #expect(scraped, "series eventbusd does not write: \(missing.sorted())")

        let prometheus = try PrometheusServer(config: """
            global:
              scrape_interval: 1s
              evaluation_interval: 1s
            rule_files: [\(Self.rules)]
            scrape_configs:
              - job_name: eventbusd
                static_configs:
                  - targets: ["127.0.0.1:\(host.port)"]
            """, in: directory)
        #expect(await eventually { prometheus.value("up{job=\"eventbusd\"}") == "1" }, "\(prometheus.log)")
        for query in queries {
            let answer = prometheus.query(query)
            #expect(answer?["status"]?.stringValue == "success", "\(query): \(answer.map { "\($0)" } ?? "no answer")")
        }
        // Loaded and evaluated without an error: each rule's health is "ok" once it has run.
        var rules: [JSON] = []
        let evaluated = await eventually {
            rules = prometheus.get("/api/v1/rules")?["data"]?["groups"]?.arrayValue?.flatMap { $0["rules"]?.arrayValue ?? [] } ?? []
            return rules.count == expressions.count && rules.allSatisfy { $0["health"]?.stringValue == "ok" }
        }
        #expect(evaluated, "rules: \(rules.map { "\($0["name"]?.stringValue ?? "?"): \($0["health"]?.stringValue ?? "?") \($0["lastError"]?.stringValue ?? "")" })\n\(prometheus.log.suffix(2000))")
        // And a healthy host fires none of them.
        let firing = prometheus.get("/api/v1/alerts")?["data"]?["alerts"]?.arrayValue?.compactMap { $0["labels"]?["alertname"]?.stringValue } ?? []
        #expect(firing.isEmpty, "alerts on a healthy host: \(firing)")
    }
}
