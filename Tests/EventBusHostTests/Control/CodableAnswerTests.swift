import ControlProtocol
import Foundation
import Testing
import TestSupport

/// The cold-path answers (`status`, `stats`, `modules`, `rules`, `listing`) as the host writes
/// them and a client reads them: the exact lines of the protocol, read back to the same values,
/// a newer host's extra members and an older one's missing optional members tolerated, and a
/// malformed answer refused with the member's path.
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
        #expect(line(ModulesAnswer(modules: [Self.module]).json).hasPrefix(#"{"modules":[{"config_not_applied":"/etc/eventbus.yaml:3","delivered":5,"#))
        #expect(line(ModulesAnswer(modules: []).json) == #"{"modules":[],"type":"modules"}"#)
        #expect(line(RulesAnswer(rules: [Self.rule]).json) == #"{"rules":[{"dropped":0,"failed":1,"fired":3,"last_outcome":"exit 3","last_run_time":"2026-01-01T00:00:01Z","launcher":"systemd","location":"/etc/eventbus.yaml:12","mode":"queue","name":"r","queued":1,"reason":"no such unit","running":0,"runs":2,"skipped":1,"state":"failed","stopped":0,"succeeded":1,"timed_out":0}],"type":"rules"}"#)
        #expect(line(Self.listing.json) == #"{"entries":[{"is_dir":false,"path":"/srv/a"},{"is_dir":true,"path":"/srv/d"}],"root":"/srv","root_exists":true,"seq":7,"source":"files:/srv recursive","type":"listing"}"#)
    }

    // MARK: Read back

    @Test func everyAnswerReadsBackAsTheValueItWasWrittenFrom() throws {
        var stopping = Self.status
        stopping.stopping = Self.stopping
        for status in [Self.status, stopping] {
            #expect(try decode(line(status.json)) == .status(status))
        }
        var stats = Self.stats
        stats.stopping = Self.stopping
        for stats in [Self.stats, stats] {
            #expect(try decode(line(stats.json)) == .stats(stats))
        }
        #expect(try decode(line(ModulesAnswer(modules: [Self.module]).json)) == .modules([Self.module]))
        #expect(try decode(line(RulesAnswer(rules: [Self.rule]).json)) == .rules([Self.rule]))
        #expect(try decode(line(Self.listing.json)) == .listing(Self.listing))
    }

    // MARK: Other hosts

    /// Members a newer host adds — at the top and inside every object — are ignored.
    @Test func aNewerHostsExtraMembersAreIgnored() throws {
        var newer = line(Self.status.json)
        for member in [#""clients":2"#, #""held":10"#, #""descriptors":5"#, #""pid":77"#, #""id":"timer""#, #""pid":1"#] {
            newer = newer.replacingOccurrences(of: member, with: member + #","added_later":{"n":[1,"x"]}"#)
        }
        #expect(newer.components(separatedBy: "added_later").count == 7, "\(newer)")
        #expect(try decode(newer) == .status(Self.status))
        let rules = line(RulesAnswer(rules: [Self.rule]).json).replacingOccurrences(of: #""fired":3"#, with: #""fired":3,"retries":2"#)
        #expect(try decode(rules) == .rules([Self.rule]))
        let listing = line(Self.listing.json).replacingOccurrences(of: #""is_dir":true"#, with: #""is_dir":true,"mode":493"#)
        #expect(try decode(listing) == .listing(Self.listing))
    }

    /// An older host leaves out the optional members (`?` in PROTOCOL.md): they read as nil.
    @Test func anOlderHostsMissingOptionalMembersReadAsNil() throws {
        let older = #"{"type":"status","protocol":1,"pid":1,"config":"/c","started":"s","uptime_seconds":1,"posted":0,"subscriptions":0,"sources":[{"id":"timer","subscriptions":1}],"modules":[{"name":"m","path":"/m.so","state":"active","delivered":0,"dropped":0,"queued":0,"queued_bytes":0,"errors":0,"isolation":"none","restarts":0}],"control":{"socket":"/s","clients":0,"tailing":0,"replay":{"capacity":1,"held":0,"byte_capacity":1,"bytes":0,"oldest_seq":0,"newest_seq":0},"refused":{"limit":0,"descriptors":0}},"state":"running"}"#
        guard case .status(let status) = try decode(older) else {
            Issue.record("not a status answer")
            return
        }
        #expect(status.life == nil && status.bridge == nil && status.stopping == nil && status.state == .running)
        #expect(status.uptimeSeconds == 1, "an integer reads as a double")
        #expect(status.sources.map(\.state) == [nil])
        let module = try #require(status.modules.first)
        #expect([module.reason, module.reportedName, module.version, module.lastCrash, module.lastCrashTime, module.configNotApplied] == [nil, nil, nil, nil, nil, nil])
        #expect(module.workerProcessID == nil)
        let stats = #"{"type":"stats","pid":1,"uptime_seconds":2.0,"posted":0,"subscriptions":0,"clients":0,"modules":[{"name":"m","state":"active","delivered":0,"dropped":0,"queued":0,"errors":0}],"tailing":[],"state":"running"}"#
        guard case .stats(let report) = try decode(stats) else {
            Issue.record("not a stats answer")
            return
        }
        #expect(report.process == nil && report.modules.first?.handlerSeconds == nil)
        guard case .rules(let rules) = try decode(#"{"type":"rules","rules":[{"name":"r","location":"f:1","state":"active","mode":"queue","launcher":"process","fired":0,"skipped":0,"dropped":0,"runs":0,"succeeded":0,"failed":0,"timed_out":0,"stopped":0,"running":0,"queued":0}]}"#) else {
            Issue.record("not a rules answer")
            return
        }
        #expect(rules.first?.reason == nil && rules.first?.lastRunTime == nil && rules.first?.lastOutcome == nil)
    }

    // MARK: Malformed answers

    /// A member missing or of another kind is refused, naming its path — not read as 0 or "?".
    @Test func aMalformedAnswerIsRefusedNamingTheMember() {
        let status = line(Self.status.json)
        let cases: [(String, String)] = [
            (status.replacingOccurrences(of: #""clients":2"#, with: #""clients":"2""#),
             #"a status answer's "control.clients": expected an integer, found a string"#),
            (status.replacingOccurrences(of: #""socket":"/run/s","#, with: ""), #"a status answer needs "control.socket""#),
            (status.replacingOccurrences(of: #""name":"m","#, with: ""), #"a status answer needs "modules[0].name""#),
            (status.replacingOccurrences(of: #""uptime_seconds":1.5"#, with: #""uptime_seconds":null"#),
             #"a status answer's "uptime_seconds": expected a number, found null"#),
            (status.replacingOccurrences(of: #""state":"running""#, with: #""state":"dancing""#),
             #"a status answer's "state": Cannot initialize HostState from invalid String value dancing"#),
            (line(Self.stats.json).replacingOccurrences(of: #""le":[0.001,0.01]"#, with: #""le":{}"#),
             #"a stats answer's "modules[0].handler_seconds.le": expected a list, found an object"#),
            (#"{"type":"modules","modules":{"name":"m"}}"#, #"a modules answer's "modules": expected a list, found an object"#),
            (#"{"type":"rules","rules":[{"name":"r"}]}"#, #"a rules answer needs "rules[0].location""#),
            (line(Self.listing.json).replacingOccurrences(of: #""is_dir":true"#, with: #""is_dir":1"#),
             #"a listing answer's "entries[1].is_dir": expected true or false, found an integer"#),
            (line(Self.listing.json).replacingOccurrences(of: #""seq":7"#, with: #""seq":-7"#),
             #"a listing answer's "seq": -7 is out of range for UInt64"#),
        ]
        for (text, message) in cases {
            do {
                let decoded = try decode(text)
                Issue.record("\(text) read as \(decoded)")
            } catch {
                #expect("\(error)" == message)
            }
        }
    }

    /// The real `eventbus` against a peer that answers as a newer, an older or a broken host
    /// would: it shows the first two, and for the third exits 1 with a message naming the member
    /// — it does not crash, and does not show a 0 it was not sent.
    @Test func theCLIShowsOtherHostsAnswersAndRefusesMalformedOnes() async throws {
        let directory = try TemporaryDirectory()
        let host = try ScriptedHost(at: directory.path + "/control.sock")
        func run(_ arguments: [String], answer: String) async throws -> CLIResult {
            async let request = host.serveOne(answer: answer)
            let result = try await eventbus(arguments + ["--socket", host.path], in: directory)
            _ = try await request
            return result
        }

        let newer = line(Self.status.json).replacingOccurrences(of: #""clients":2"#, with: #""clients":2,"added_later":true"#)
        let shown = try await run(["status"], answer: newer)
        #expect(shown.status == 0, "\(shown.stderr)")
        #expect(shown.stdout.contains("control:       /run/s, 2 client(s), 1 tailing; replay holds 10/100 (#1-#10)"), "\(shown.stdout)")
        #expect(shown.stdout.contains("refused 4 connection(s) over a client limit, 5 for want of file descriptors"), "\(shown.stdout)")

        let malformed: [([String], String, String)] = [
            (["status"], line(Self.status.json).replacingOccurrences(of: #""clients":2"#, with: #""clients":"2""#),
             #"a status answer's "control.clients": expected an integer, found a string"#),
            (["modules"], #"{"type":"modules","modules":[{"name":"m"}]}"#, #"a modules answer needs "modules[0].path""#),
            (["rules"], #"{"type":"rules","rules":[{"name":"r"}]}"#, #"a rules answer needs "rules[0].location""#),
            (["files", "/srv"], line(Self.listing.json).replacingOccurrences(of: #""is_dir":true,"#, with: ""),
             #"a listing answer needs "entries[1].is_dir""#),
            (["top", "--once"], line(Self.stats.json).replacingOccurrences(of: #""threads":9"#, with: #""threads":9.5"#),
             #"a stats answer's "process.threads": expected an integer, found a number"#),
        ]
        for (arguments, answer, message) in malformed {
            let refused = try await run(arguments, answer: answer)
            #expect(refused.status == 1, "eventbus \(arguments): \(refused.stdout)")
            #expect(refused.stderr.contains("eventbusd's \(arguments[0] == "files" ? "listing" : arguments[0] == "top" ? "stats" : arguments[0]) answer: \(message)"),
                    "eventbus \(arguments): \(refused.stderr)")
        }
    }
}

/// The host's side of the control socket for one connection at a time, as a test scripts it:
/// it greets as eventbusd does, reads one request and answers it with the line it is given —
/// what a newer, an older or a broken host would send, which the real one does not.
private final class ScriptedHost: @unchecked Sendable {
    let path: String
    private let listener: Int32

    init(at path: String) throws {
        self.path = path
        listener = try SocketActivationTests.listeningSocket(at: path)
        // A bound for a broken test only: accept and reads give up after a minute.
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(listener, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Serves one client: `hello`, its request line (returned), then `answer`, and closes.
    func serveOne(answer: String) async throws -> String {
        try await blocking { [listener] in
            let client = accept(listener, nil, nil)
            guard client >= 0 else { throw POSIXError(.ETIMEDOUT) }
            defer { close(client) }
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let hello = #"{"type":"hello","protocol":1,"server":"eventbusd","pid":1,"uid":0,"may":["tail","status","modules","rules","stats","listing","metrics"]}"#
            Self.send(client, hello + "\n")
            var request: [UInt8] = []
            var byte: UInt8 = 0
            while recv(client, &byte, 1, 0) == 1, byte != UInt8(ascii: "\n") { request.append(byte) }
            Self.send(client, answer + "\n")
            return String(decoding: request, as: UTF8.self)
        }
    }

    private static func send(_ client: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { Glibc.send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { return }
            sent += count
        }
    }

    deinit {
        close(listener)
        unlink(path)
    }
}
