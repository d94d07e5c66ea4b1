import ControlProtocol
import EventBusHost
import Foundation
import Testing
import TestSupport

/// Rules in the real eventbusd, driven by the real CLI: real files, real commands, real process
/// groups; the record read back with `eventbus tail` and `eventbus rules`.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct RulesDaemonTests {
    /// A host with `rules` (YAML list items under `rules:`; `DIR` stands for its folder and
    /// `RECORD` for the recorder script), a files watch of `DIR/watched`, its control socket at
    /// `DIR/run/control.sock`.
    final class Host: @unchecked Sendable {
        let directory: TemporaryDirectory
        let socket: String
        let configPath: String
        private(set) var daemon: DaemonProcessTests.Daemon!
        var path: String { directory.path }
        var record: String { path + "/record" }

        init(rules: String, extra: String = "", start: Bool = true,
             beforeStart: (String) throws -> Void = { _ in }) async throws {
            directory = try TemporaryDirectory()
            try beforeStart(directory.path)
            try FileManager.default.createDirectory(atPath: directory.path + "/watched", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: directory.path + "/out", withIntermediateDirectories: true)
            // Its arguments NUL-separated, their count, its EVENTBUS_ variables and its standard
            // input, into out/<EVENTBUS_SEQ>.<part>, each written whole.
            try Self.script(in: directory, "record", """
                #!/bin/sh
                out="\(directory.path)/out/$EVENTBUS_SEQ"
                printf '%s\\0' "$@" > "$out.args.tmp"
                echo "$#" > "$out.argc.tmp"
                env | grep '^EVENTBUS_' | sort > "$out.env.tmp"
                cat > "$out.stdin.tmp"
                for part in args argc env stdin; do mv "$out.$part.tmp" "$out.$part"; done
                echo "recorded $EVENTBUS_SEQ"
                """)
            let config = controlConfig(directory, rest: """
                state_directory: \(directory.path)/state
                sources:
                  files:
                    - { name: watched, path: \(directory.path)/watched }
                \(extra)
                """)
            socket = config.socket
            configPath = try directory.write("eventbus.yaml", config.yaml + "rules:\n" + Self.fill(rules, directory.path))
            if start {
                daemon = try DaemonProcessTests.Daemon(arguments: ["--config", configPath], in: directory)
                guard await daemon.waitFor("ready; SIGHUP reloads") else { throw POSIXError(.ETIMEDOUT) }
            }
        }

        /// Why the host did not answer, with what it wrote: a test that lost its host says how.
        struct Unreachable: Error, CustomStringConvertible {
            var description: String
        }

        func unreachable(_ error: any Error) -> Unreachable {
            let process = daemon.process
            let state = process.isRunning ? "still running" : "ended (\(process.terminationReason == .uncaughtSignal ? "signal" : "status") \(process.terminationStatus))"
            return Unreachable(description: "\(error); eventbusd \(state), its output:\n\(daemon.output)")
        }

        static func fill(_ text: String, _ directory: String) -> String {
            text.replacingOccurrences(of: "RECORD", with: directory + "/record").replacingOccurrences(of: "DIR", with: directory)
        }

        @discardableResult
        static func script(in directory: TemporaryDirectory, _ name: String, _ text: String) throws -> String {
            let path = try directory.write(name, text)
            chmod(path, 0o755)
            return path
        }

        /// Replaces the rules and reloads through `eventbus reload`.
        func reload(rules: String) async throws -> CLIResult {
            let text = try String(contentsOfFile: configPath, encoding: .utf8)
            let head = text.components(separatedBy: "rules:\n")[0]
            try (head + "rules:\n" + Self.fill(rules, path)).write(toFile: configPath, atomically: true, encoding: .utf8)
            return try await eventbus(["reload", "--socket", socket], in: directory)
        }

        func post(_ name: String, _ fields: [String: JSON] = [:]) throws -> Int64 {
            let answer: JSON
            do { answer = try ask(socket, ["op": "post", "name": .string(name), "fields": .object(fields)]) } catch {
                throw unreachable(error)
            }
            guard let sequence = answer["seq"]?.intValue else { throw POSIXError(.EPROTO) }
            return sequence
        }

        /// The bus's `rule.*` and `action.*` events about `rule`, oldest first: what the host's
        /// replay holds, read over the socket (polling through a new `eventbus` process each
        /// time would spawn hundreds of them per test).
        func record(of rule: String) throws -> [JSON] {
            let connection: ControlConnection
            do { (connection, _) = try rawConnection(socket) } catch { throw unreachable(error) }
            try connection.send(["op": "subscribe", "patterns": ["rule.>", "action.>"], "match": ["rule": [.string(rule)]],
                                 "since_seq": .int(1), "follow": .bool(false)])
            var events: [JSON] = []
            while let line = try connection.readJSON() {
                switch line["type"]?.stringValue {
                case "event": events.append(line)
                case "end": return events
                default: continue
                }
            }
            return events
        }

        /// The same record through `eventbus tail -o json`, as an operator reads it.
        func recordThroughTheCLI(of rule: String) async throws -> [JSON] {
            let result = try await eventbus(["tail", "--socket", socket, "--no-follow", "--since", "1", "-o", "json",
                                              "rule.>", "action.>", "rule=\(rule)"], in: directory)
            return result.stdout.split(separator: "\n").compactMap { try? JSON.parse(String($0)) }
        }

        /// Waits until the record of `rule` holds at least `count` events named `name`; returns them.
        func waitFor(_ count: Int, _ name: String, of rule: String) async throws -> [JSON] {
            let deadline = ContinuousClock.now + patience
            while true {
                let found = try record(of: rule).filter { $0["name"]?.stringValue == name }
                if found.count >= count || ContinuousClock.now > deadline { return found }
                try await Task.sleep(for: .milliseconds(50))
            }
        }

        func rules() throws -> [RuleReport] {
            guard case .rules(let rules) = try ControlResponse.decode(ask(socket, ["op": "rules"])) else { throw POSIXError(.EPROTO) }
            return rules
        }

        func rule(_ name: String) throws -> RuleReport? { try rules().first { $0.name == name } }

        func output(_ sequence: Int64, _ part: String) -> String? {
            try? String(contentsOfFile: "\(path)/out/\(sequence).\(part)", encoding: .utf8)
        }

        func stop() async {
            daemon.signal(SIGTERM)
            _ = await daemon.exitStatus()
        }
    }

    static func field(_ event: JSON, _ name: String) -> JSON? { event["fields"]?[name] }

    /// The pid a command wrote to `file` (`echo $! > file`).
    static func pid(in file: String) -> Int32? {
        (try? String(contentsOfFile: file, encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    static func isAlive(_ pid: Int32) -> Bool {
        // A zombie is gone for our purposes: it no longer runs.
        guard kill(pid, 0) == 0 else { return false }
        let status = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
        return !status.contains(") Z ")
    }

    @Test func aFileWriteRunsTheCommandWithTheEventAsArgumentsVariablesAndStandardInput() async throws {
        let host = try await Host(rules: """
              - name: on-conf
                on: fs.closed
                where: { path: "*/watched/*.conf" }
                run: ["RECORD", "{{path}}", "--change={{event.name}}"]
            """)
        try "x".write(toFile: host.path + "/watched/other.txt", atomically: false, encoding: .utf8)
        try "x".write(toFile: host.path + "/watched/site.conf", atomically: false, encoding: .utf8)
        let finished = try await host.waitFor(1, "action.finished", of: "on-conf")
        let record = try await host.recordThroughTheCLI(of: "on-conf")
        #expect(record.map { $0["name"]!.stringValue! } == ["rule.fired", "action.started", "action.finished"], "\(record)")
        let trigger = try #require(Self.field(record[0], "trigger_seq")?.intValue)
        #expect(Self.field(finished[0], "outcome") == "success")
        #expect(Self.field(finished[0], "exit_status")?.intValue == 0)
        #expect(Self.field(finished[0], "output")?.stringValue == "recorded \(trigger)")
        #expect(Self.field(record[1], "pid")?.intValue != nil)
        #expect(host.output(trigger, "args") == "\(host.path)/watched/site.conf\u{0}--change=fs.closed\u{0}")
        let variables = host.output(trigger, "env") ?? ""
        #expect(variables.contains("EVENTBUS_EVENT=fs.closed\n"), "\(variables)")
        #expect(variables.contains("EVENTBUS_FIELD_PATH=\(host.path)/watched/site.conf\n"))
        #expect(variables.contains("EVENTBUS_RULE=on-conf\n"))
        let input = try JSON.parse(host.output(trigger, "stdin") ?? "")
        #expect(input["name"] == "fs.closed")
        #expect(input["seq"]?.intValue == trigger)
        let listed = try #require(try host.rule("on-conf"))
        #expect(listed.runs == 1 && listed.succeeded == 1 && listed.fired == 1 && listed.launcher == "process")
        #expect(listed.lastOutcome == "success")
        let table = try await eventbus(["rules", "--socket", host.socket], in: host.directory)
        #expect(table.stdout.contains("on-conf") && table.stdout.contains("success"), "\(table.stdout)")
        await host.stop()
    }

    /// `from:` opens a source for the rule alone: a folder no config watch names.
    @Test func aRuleOpensItsOwnFilesSourceAndSeesOnlyItsEvents() async throws {
        let host = try await Host(rules: """
              - name: own-folder
                on: fs.closed
                from: { files: DIR/private }
                run: ["RECORD", "{{path}}"]
            """, beforeStart: { directory in
                try FileManager.default.createDirectory(atPath: directory + "/private", withIntermediateDirectories: true)
            })
        try "x".write(toFile: host.path + "/watched/elsewhere", atomically: false, encoding: .utf8)
        try "x".write(toFile: host.path + "/private/mine", atomically: false, encoding: .utf8)
        let finished = try await host.waitFor(1, "action.finished", of: "own-folder")
        let trigger = try #require(Self.field(finished[0], "trigger_seq")?.intValue)
        #expect(host.output(trigger, "args") == "\(host.path)/private/mine\u{0}")
        #expect(try host.record(of: "own-folder").filter { $0["name"] == "rule.fired" }.count == 1)
        await host.stop()
    }

    /// Shell syntax, newlines, option-looking text, templates and a megabyte: each value is the
    /// one argument it was placed in, never more, never less, never read by a shell.
    @Test func hostileFieldValuesNeverChangeTheArgumentsNorReachAShell() async throws {
        let host = try await Host(rules: """
              - name: hostile
                on: user.evil
                mode: queued
                max: 100
                run: ["RECORD", "{{value}}", "x{{value}}y", "{{missing}}"]
            """)
        let canary = host.path + "/pwned"
        let values = ["a b c", "'; touch \(canary) #", "$(touch \(canary))", "`touch \(canary)`", "line\nbreak\n",
                      "--help", "{{value}}", "*", "ünï\u{202E}", String(repeating: "m", count: 100_000)]
        var sequences: [Int64] = []
        for value in values { sequences.append(try host.post("user.evil", ["value": .string(value)])) }
        let finished = try await host.waitFor(values.count, "action.finished", of: "hostile")
        #expect(finished.count == values.count)
        for (value, sequence) in zip(values, sequences) {
            #expect(host.output(sequence, "argc") == "3\n", "\(value.prefix(40))")
            #expect(host.output(sequence, "args") == "\(value)\u{0}x\(value)y\u{0}\u{0}", "\(value.prefix(40))")
        }
        #expect(!FileManager.default.fileExists(atPath: canary))
        // A NUL cannot be an argument: the run fails with the reason, the rule lives on.
        _ = try host.post("user.evil", ["value": .string("a\u{0}b")])
        let failed = try await host.waitFor(1, "action.failed", of: "hostile")
        #expect(Self.field(failed[0], "reason")?.stringValue?.contains("NUL") == true)
        let after = try host.post("user.evil", ["value": "fine"])
        _ = try await host.waitFor(values.count + 1, "action.finished", of: "hostile")
        #expect(host.output(after, "argc") == "3\n")
        await host.stop()
    }

    @Test func singleSkipsWhileRunningAndAFailingCommandKeepsTheRuleAlive() async throws {
        let host = try await Host(rules: """
              - name: one-at-a-time
                on: user.go
                run: ["/bin/sh", "-c", "while [ ! -e DIR/release ]; do sleep 0.02; done; exit 3"]
            """)
        _ = try host.post("user.go")
        _ = try await host.waitFor(1, "action.started", of: "one-at-a-time")
        _ = try host.post("user.go")
        _ = try host.post("user.go")
        let skipped = try await host.waitFor(2, "rule.skipped", of: "one-at-a-time")
        #expect(skipped.allSatisfy { Self.field($0, "reason") == "already running" && Self.field($0, "mode") == "single" })
        #expect(FileManager.default.createFile(atPath: host.path + "/release", contents: nil))
        let finished = try await host.waitFor(1, "action.finished", of: "one-at-a-time")
        #expect(Self.field(finished[0], "outcome") == "exit" && Self.field(finished[0], "exit_status")?.intValue == 3)
        _ = try host.post("user.go")
        _ = try await host.waitFor(2, "action.finished", of: "one-at-a-time")
        let listed = try #require(try host.rule("one-at-a-time"))
        #expect(listed.fired == 4 && listed.skipped == 2 && listed.runs == 2 && listed.failed == 2 && listed.lastOutcome == "exit 3")
        await host.stop()
    }

    /// `restart`: the running command and what it started are stopped (SIGTERM to its process
    /// group), then the newest trigger runs.
    @Test func restartStopsTheRunningCommandsWholeGroupBeforeTheNewestRuns() async throws {
        let host = try await Host(rules: """
              - name: restarter
                on: user.change
                mode: restart
                run: ["/bin/sh", "-c", "sleep 600 & echo $! > DIR/child-$EVENTBUS_SEQ; wait"]
            """)
        let first = try host.post("user.change")
        _ = try await host.waitFor(1, "action.started", of: "restarter")
        #expect(await eventually { FileManager.default.fileExists(atPath: "\(host.path)/child-\(first)") })
        let child = try #require(Self.pid(in: "\(host.path)/child-\(first)"))
        #expect(Self.isAlive(child))
        let second = try host.post("user.change")
        let started = try await host.waitFor(2, "action.started", of: "restarter")
        let finished = try await host.waitFor(1, "action.finished", of: "restarter")
        #expect(Self.field(finished[0], "outcome") == "stopped")
        #expect(Self.field(started[1], "trigger_seq")?.intValue == second)
        #expect(await eventually { !Self.isAlive(child) }, "the stopped command's child is gone too")
        await host.stop()
    }

    @Test func queuedBoundsItsQueueAndParallelItsRunsCountingWhatTheyDrop() async throws {
        let host = try await Host(rules: """
              - name: queue
                on: user.q
                mode: queued
                max: 1
                run: ["/bin/sh", "-c", "while [ ! -e DIR/release ]; do sleep 0.02; done"]
              - name: fan
                on: user.p
                mode: parallel
                max: 2
                run: ["/bin/sh", "-c", "while [ ! -e DIR/release ]; do sleep 0.02; done"]
            """)
        for _ in 0..<3 { _ = try host.post("user.q") }
        for _ in 0..<3 { _ = try host.post("user.p") }
        let queueSkipped = try await host.waitFor(1, "rule.skipped", of: "queue")
        #expect(Self.field(queueSkipped[0], "reason") == "queue full")
        let fanSkipped = try await host.waitFor(1, "rule.skipped", of: "fan")
        #expect(Self.field(fanSkipped[0], "reason") == "at its maximum of parallel runs")
        #expect(await eventually { (try? host.rule("queue"))?.queued == 1 && (try? host.rule("fan"))?.running == 2 })
        #expect(FileManager.default.createFile(atPath: host.path + "/release", contents: nil))
        _ = try await host.waitFor(2, "action.finished", of: "queue")
        _ = try await host.waitFor(2, "action.finished", of: "fan")
        let queue = try #require(try host.rule("queue"))
        #expect(queue.runs == 2 && queue.succeeded == 2 && queue.skipped == 1)
        await host.stop()
    }

    @Test func aTimeoutStopsTheCommandAndEverythingItStarted() async throws {
        let host = try await Host(rules: """
              - name: slow
                on: user.slow
                timeout: 500ms
                run: ["/bin/sh", "-c", "trap '' TERM; sleep 600 & echo $! > DIR/child; wait"]
            """)
        _ = try host.post("user.slow")
        let finished = try await host.waitFor(1, "action.finished", of: "slow")
        #expect(Self.field(finished[0], "outcome") == "timeout")
        let child = try #require(Self.pid(in: host.path + "/child"))
        #expect(await eventually { !Self.isAlive(child) })
        #expect(try host.rule("slow")?.timedOut == 1)
        await host.stop()
    }

    /// `then:` runs in order and stops at the first action that fails; a derived event triggers
    /// other rules, never the rule that posted it.
    @Test func thenRunsInOrderStopsAtAFailureAndDerivedEventsChainRules() async throws {
        let host = try await Host(rules: """
              - name: chain
                on: user.start
                then:
                  - post: { name: user.derived, fields: { from: "{{event.name}}" } }
                  - run: ["/bin/false"]
                  - log: never reached
              - name: follower
                on: user.derived
                where: { from: user.start }
                run: ["RECORD", "{{from}}"]
            """)
        _ = try host.post("user.start")
        let followed = try await host.waitFor(1, "action.finished", of: "follower")
        let seen = "\(try host.record(of: "follower")) \(try host.record(of: "chain")) \(host.daemon.output)"
        try #require(followed.count == 1, "\(seen)")
        #expect(Self.field(followed[0], "outcome") == "success")
        let chain = try await host.waitFor(2, "action.finished", of: "chain")
        #expect(chain.map { Self.field($0, "action")?.intValue } == [1, 2])
        #expect(Self.field(chain[1], "exit_status")?.intValue == 1)
        try await Task.sleep(for: .milliseconds(200))
        #expect(try host.record(of: "chain").filter { $0["name"] == "action.finished" }.count == 2)
        await host.stop()
    }

    /// Two rules that post what each other reacts to stop after a bounded number of rounds, and say so.
    @Test func rulesThatTriggerEachOtherStopAtTheDepthLimit() async throws {
        let host = try await Host(rules: """
              - name: ping
                on: [user.start, user.pong]
                mode: parallel
                post: user.ping
              - name: pong
                on: user.ping
                mode: parallel
                post: user.pong
            """)
        _ = try host.post("user.start")
        let skipped = try await host.waitFor(1, "rule.skipped", of: "ping")
        #expect(Self.field(skipped[0], "reason")?.stringValue?.contains("8 rules deep") == true, "\(skipped)")
        try await Task.sleep(for: .milliseconds(300))
        let fired = try host.record(of: "ping").filter { $0["name"] == "rule.fired" }.count
        #expect(fired == 4, "ping fires on the start and on pongs of depth 2, 4 and 6")
        #expect(try host.record(of: "pong").filter { $0["name"] == "rule.fired" }.count == 4)
        await host.stop()
    }

    /// A webhook goes through the durable outbox: delivered with an idempotency key, recorded with
    /// its HTTP status; a 500 costs a retry with the same key.
    @Test func aWebhookIsDeliveredWithItsKeyAndRetriedAfterA500() async throws {
        let folder = try TemporaryDirectory()
        let receiver = try await WebhookReceiver(in: folder)
        let host = try await Host(rules: """
              - name: hook
                on: user.alert
                mode: parallel
                webhook:
                  url: "\(receiver.url("/do/500,200"))"
                  headers: { X-Unit: "{{unit}}" }
              - name: plain
                on: user.alert
                webhook: "\(receiver.url("/plain"))"
            """)
        let sequence = try host.post("user.alert", ["unit": "nginx.service"])
        let finished = try await host.waitFor(1, "action.finished", of: "hook")
        #expect(Self.field(finished[0], "http_status")?.intValue == 200)
        #expect(Self.field(finished[0], "attempts")?.intValue == 2)
        let started = try await host.waitFor(1, "action.started", of: "hook")
        let key = try #require(Self.field(started[0], "idempotency_key")?.stringValue)
        let requests = receiver.requests(key: key)
        #expect(requests.count == 2, "the same key on both attempts: \(receiver.requests)")
        #expect(requests.allSatisfy { $0.headers(named: "X-Unit") == ["nginx.service"] })
        // Without a body: the event as JSON.
        _ = try await host.waitFor(1, "action.finished", of: "plain")
        let plain = try #require(receiver.requests.first { $0.path == "/plain" })
        let event = try JSON.parse(plain.body)
        #expect(event["seq"]?.intValue == sequence && event["fields"]?["unit"] == "nginx.service", "\(plain.body)")
        await host.stop()
    }

    /// Deliveries queued while the receiver is down survive a SIGKILL of the host: its next life
    /// delivers every one, each key at least once.
    @Test func webhooksQueuedBeforeASIGKILLAreDeliveredByTheNextHost() async throws {
        let folder = try TemporaryDirectory()
        let receiver = try await WebhookReceiver(in: folder)
        let port = receiver.port
        receiver.stop()
        let host = try await Host(rules: """
              - name: durable
                on: user.alert
                mode: parallel
                max: 100
                webhook: { url: "http://127.0.0.1:\(port)/in", attempts: 1000 }
            """)
        for index in 0..<20 { _ = try host.post("user.alert", ["n": .int(Int64(index))]) }
        let started = try await host.waitFor(20, "action.started", of: "durable")
        let keys = Set(started.compactMap { Self.field($0, "idempotency_key")?.stringValue })
        #expect(keys.count == 20)
        host.daemon.signal(SIGKILL)
        _ = await host.daemon.exitStatus()
        let back = try await WebhookReceiver(in: folder, port: port)
        let next = try DaemonProcessTests.Daemon(arguments: ["--config", host.configPath], in: host.directory)
        #expect(await next.waitFor("ready; SIGHUP reloads"), "\(next.output)")
        let delivered = await eventually { Set(back.requests.compactMap(\.key)).isSuperset(of: keys) }
        #expect(delivered, "missing: \(keys.subtracting(back.requests.compactMap(\.key)))")
        next.signal(SIGTERM)
        _ = await next.exitStatus()
    }

    /// A reload adds, changes and removes rules; a removed rule's running command goes on to its end.
    @Test func aReloadRetiresARemovedRuleButLetsItsRunningCommandFinish() async throws {
        let host = try await Host(rules: """
              - name: old
                on: user.tick
                run: ["/bin/sh", "-c", "while [ ! -e DIR/release ]; do sleep 0.02; done; echo done"]
            """)
        _ = try host.post("user.tick")
        _ = try await host.waitFor(1, "action.started", of: "old")
        let reload = try await host.reload(rules: """
              - name: new
                on: user.tick
                run: ["RECORD"]
            """)
        #expect(reload.status == 0, "\(reload.stderr)")
        #expect(try host.rules().map(\.name) == ["new"])
        let tick = try host.post("user.tick")
        _ = try await host.waitFor(1, "action.finished", of: "new")
        #expect(host.output(tick, "argc") == "0\n")
        // The old rule took no trigger, and its run is still under way until released.
        #expect(try host.record(of: "old").filter { $0["name"] == "rule.fired" }.count == 1)
        #expect(try host.record(of: "old").filter { $0["name"] == "action.finished" }.isEmpty)
        #expect(FileManager.default.createFile(atPath: host.path + "/release", contents: nil))
        let finished = try await host.waitFor(1, "action.finished", of: "old")
        #expect(Self.field(finished[0], "outcome") == "success")
        await host.stop()
    }

    /// A thousand loaded rules: listed, and an event none of them matches fires none.
    @Test func aThousandRulesLoadAndAnEventMatchingNoneFiresNone() async throws {
        let rules = (0..<1000).map { "  - { name: r\($0), on: user.never.\($0), log: hi }\n" }.joined()
        let host = try await Host(rules: rules)
        #expect(try host.rules().count == 1000)
        _ = try host.post("user.other")
        let fired = try await eventbus(["tail", "--socket", host.socket, "--no-follow", "--since", "1", "rule.fired"], in: host.directory)
        #expect(fired.stdout.isEmpty, "\(fired.stdout.prefix(500))")
        _ = try host.post("user.never.999")
        _ = try await host.waitFor(1, "action.finished", of: "r999")
        await host.stop()
    }

    @Test func rulesTestSaysWhatWouldRunWithoutRunningIt() async throws {
        let host = try await Host(rules: """
              - name: show
                on: fs.closed
                where: { path: "/etc/*.conf" }
                debounce: 1s
                run: ["RECORD", "{{path}}", "two words"]
              - name: other
                on: user.x
                log: no
            """, start: false)
        let result = try await eventbus(["rules", "test", "--config", host.configPath, "--event", "fs.closed path=/etc/a.conf size=3"],
                                        in: host.directory)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("rule show ("), "\(result.stdout)")
        #expect(result.stdout.contains("through debounce"))
        #expect(result.stdout.contains("run \"\(host.record)\" \"/etc/a.conf\" \"two words\""), "\(result.stdout)")
        #expect(result.stdout.contains("1 of 2 rule(s) fire"))
        #expect((try? FileManager.default.contentsOfDirectory(atPath: host.path + "/out"))?.isEmpty == true)
        let none = try await eventbus(["rules", "test", "--config", host.configPath, "--event", "fs.closed path=/srv/a.conf"], in: host.directory)
        #expect(none.stdout.contains("where: does not"))
        let bad = try await eventbus(["rules", "test", "--config", host.configPath, "--event", "bad..name"], in: host.directory)
        #expect(bad.status == 1)
    }
}
