import ControlProtocol
import Testing

/// The cold-path answers (`status`, `stats`, `modules`, `rules`, `listing`) as the host writes
/// them: the exact lines of the protocol.
@Suite struct CodableAnswerTests {
    static let module = ModuleReport(
        name: "m", path: "/m.so", state: "failed", reason: "boom", delivered: 5, dropped: 1, queued: 2, queuedBytes: 300,
        errors: 1, reportedName: "M", version: "1.0", isolation: "process", restarts: 2, workerProcessID: 77,
        lastCrash: "SIGSEGV", lastCrashTime: "2026-01-01T00:00:00Z", configNotApplied: "/etc/eventbus.yaml:3")

    static let stopping = StoppingReport(step: "draining_modules", budgetSeconds: 30, remainingSeconds: 12.5,
                                         modules: [.init(name: "m", state: "active", queued: 5)], ruleRuns: 1, tails: 2, tailQueued: 7)

    static var status: StatusReport {
        var status = StatusReport(
            processID: 1, configFile: "/etc/eventbus.yaml", started: "2026-01-01T00:00:00Z", uptimeSeconds: 1.5, posted: 10,
            subscriptions: 3, sources: [.init(id: "journal", subscriptions: 1, state: "following"), .init(id: "timer", subscriptions: 2)],
            modules: [module],
            control: .init(socket: "/run/s", clients: 2, tailing: 1,
                           replay: .init(capacity: 100, held: 10, byteCapacity: 1000, bytes: 500, oldestSequence: 1, newestSequence: 10),
                           refusedForLimit: 4, refusedForDescriptors: 5),
            bridge: ["state": "connected", "exported": .int(3), "origins": [["host": "b", "seq": .int(9)]]])
        status.life = "3f9a0c12b7e4"
        return status
    }

    static var stats: StatsReport {
        StatsReport(
            processID: 1, uptimeSeconds: 2, posted: 10, subscriptions: 3, clients: 2,
            process: .init(residentBytes: 30_000_000, openFiles: 20, threads: 9),
            modules: [.init(name: "m", state: "active", delivered: 5, dropped: 0, queued: 1, errors: 0,
                            handlerSeconds: .init(bounds: [0.001, 0.01], counts: [1, 3, 4])),
                      .init(name: "w", state: "active", delivered: 1, dropped: 0, queued: 0, errors: 0, handlerSeconds: nil)],
            tailing: [.init(client: 3, userID: 0, processID: 99, delivered: 8, dropped: 1, queued: 2, queuedBytes: 40)])
    }

    static let rule = RuleReport(name: "r", location: "/etc/eventbus.yaml:12", state: "failed", reason: "no such unit", mode: "queue",
                                 launcher: "systemd", fired: 3, skipped: 1, dropped: 0, runs: 2, succeeded: 1, failed: 1, timedOut: 0,
                                 stopped: 0, running: 0, queued: 1, lastRunTime: "2026-01-01T00:00:01Z", lastOutcome: "exit 3")

    static let listing = Listing(root: "/srv", source: "files:/srv recursive", sequence: 7, rootExists: true,
                                 entries: [.init(path: "/srv/a", isDirectory: false), .init(path: "/srv/d", isDirectory: true)])

    private func line(_ json: JSON) -> String { String(decoding: JSONWriter.line(json).dropLast(), as: UTF8.self) }

    private func decode(_ text: String) throws -> ControlResponse { try ControlResponse.decode(JSON.parse(text)) }

    // MARK: The lines of the protocol

    /// Each member and the kind of its value, as PROTOCOL.md spells them; a change of these lines
    /// is a change of the protocol.
    @Test func everyAnswerIsWrittenAsTheProtocolSpellsIt() {
        #expect(line(Self.status.json) == #"{"bridge":{"exported":3,"origins":[{"host":"b","seq":9}],"state":"connected"},"config":"/etc/eventbus.yaml","control":{"clients":2,"refused":{"descriptors":5,"limit":4},"replay":{"byte_capacity":1000,"bytes":500,"capacity":100,"held":10,"newest_seq":10,"oldest_seq":1},"socket":"/run/s","tailing":1},"life":"3f9a0c12b7e4","modules":[{"config_not_applied":"/etc/eventbus.yaml:3","delivered":5,"dropped":1,"errors":1,"isolation":"process","last_crash":"SIGSEGV","last_crash_time":"2026-01-01T00:00:00Z","name":"m","path":"/m.so","pid":77,"queued":2,"queued_bytes":300,"reason":"boom","reported_name":"M","restarts":2,"state":"failed","version":"1.0"}],"pid":1,"posted":10,"protocol":1,"sources":[{"id":"journal","state":"following","subscriptions":1},{"id":"timer","subscriptions":2}],"started":"2026-01-01T00:00:00Z","state":"running","subscriptions":3,"type":"status","uptime_seconds":1.5}"#)
        var stopping = Self.status
        stopping.stopping = Self.stopping
        #expect(line(stopping.json).contains(#""state":"stopping","stopping":{"budget_seconds":30.0,"modules":[{"name":"m","queued":5,"state":"active"}],"remaining_seconds":12.5,"rule_runs":1,"step":"draining_modules","tail_queued":7,"tails":2}"#))
        #expect(line(Self.stats.json) == #"{"clients":2,"modules":[{"delivered":5,"dropped":0,"errors":0,"handler_seconds":{"counts":[1,3,4],"le":[0.001,0.01]},"name":"m","queued":1,"state":"active"},{"delivered":1,"dropped":0,"errors":0,"name":"w","queued":0,"state":"active"}],"pid":1,"posted":10,"process":{"open_files":20,"resident_bytes":30000000,"threads":9},"state":"running","subscriptions":3,"tailing":[{"client":3,"delivered":8,"dropped":1,"pid":99,"queued":2,"queued_bytes":40,"uid":0}],"type":"stats","uptime_seconds":2.0}"#)
        #expect(line(ModulesAnswer.json([Self.module])).hasPrefix(#"{"modules":[{"config_not_applied":"/etc/eventbus.yaml:3","delivered":5,"#))
        #expect(line(ModulesAnswer.json([])) == #"{"modules":[],"type":"modules"}"#)
        #expect(line(RulesAnswer(rules: [Self.rule]).json) == #"{"rules":[{"dropped":0,"failed":1,"fired":3,"last_outcome":"exit 3","last_run_time":"2026-01-01T00:00:01Z","launcher":"systemd","location":"/etc/eventbus.yaml:12","mode":"queue","name":"r","queued":1,"reason":"no such unit","running":0,"runs":2,"skipped":1,"state":"failed","stopped":0,"succeeded":1,"timed_out":0}],"type":"rules"}"#)
        #expect(line(Self.listing.json) == #"{"entries":[{"is_dir":false,"path":"/srv/a"},{"is_dir":true,"path":"/srv/d"}],"root":"/srv","root_exists":true,"seq":7,"source":"files:/srv recursive","type":"listing"}"#)
    }
}
