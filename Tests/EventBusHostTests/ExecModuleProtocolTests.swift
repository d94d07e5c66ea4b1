import ControlProtocol
@testable import EventBusHost
@_spi(EventBusHost) import EventBusKit
import Foundation
@testable import ModuleIsolation
import Testing

/// The pure parts of exec modules: cutting a program's output into bounded lines, the post
/// allowance, subscriptions as written, the lines made from the frames a worker would get, and
/// the config entry.
@Suite struct ExecModuleProtocolTests {
    func pieces(_ chunks: [String], limit: Int) -> [BoundedLines.Piece] {
        var lines = BoundedLines(limit: limit)
        var out: [BoundedLines.Piece] = []
        for chunk in chunks {
            Array(chunk.utf8).withUnsafeBytes { lines.feed($0) { out.append($0) } }
        }
        lines.finish { out.append($0) }
        return out
    }

    @Test func linesAreCutAcrossReadsAndATooLongOneIsSkippedToItsNewline() {
        #expect(pieces(["ab", "c\nde", "f\n\ng"], limit: 8) == [.line(Array("abc".utf8)), .line(Array("def".utf8)), .line([]), .line(Array("g".utf8))])
        // 12 bytes over three reads, limit 5: skipped whole, counted, and the next line is read.
        #expect(pieces(["abcd", "efghij", "kl\nok\n"], limit: 5) == [.tooLong(length: 12), .line(Array("ok".utf8))])
        // A line of exactly the limit passes; one byte more does not.
        #expect(pieces(["12345\n123456\n"], limit: 5) == [.line(Array("12345".utf8)), .tooLong(length: 6)])
        #expect(pieces(["unfinished and too long"], limit: 5) == [.tooLong(length: 23)])
    }

    @Test func theAllowanceRefillsWithTimeAndCountsWhatItRefused() {
        var allowance = PostAllowance(rate: 10)
        let second: UInt64 = 1_000_000_000
        let start: UInt64 = 5 * second
        #expect((0..<15).filter { _ in allowance.take(at: start) }.count == 10)
        #expect(allowance.takeDropped(at: start) == 5)
        #expect(allowance.takeDropped(at: start) == nil, "nothing new")
        // Half a second later: five more; what is refused is said a second after the last report.
        #expect((0..<8).filter { _ in allowance.take(at: start + second / 2) }.count == 5)
        #expect(allowance.takeDropped(at: start + second / 2) == nil)
        #expect(allowance.takeDropped(at: start + second) == 3)
        // Never more than the rate at once, however long it was idle.
        #expect((0..<30).filter { _ in allowance.take(at: start + 100 * second) }.count == 10)
    }

    @Test func aSubscriptionIsAPatternAndFieldMatches() throws {
        let subscription = try ExecSubscription(parsing: "unit.state  active=failed active=dead unit=app-*.service")
        #expect(subscription.pattern == "unit.state")
        #expect(subscription.matches == ["active": ["failed", "dead"], "unit": ["app-*.service"]])
        #expect(subscription.description == "unit.state active=failed active=dead unit=app-*.service")
        #expect(throws: ExecSubscription.ParseError.self) { try ExecSubscription(parsing: "bad..pattern") }
        #expect(throws: ExecSubscription.ParseError.self) { try ExecSubscription(parsing: "ok.name =value") }
        #expect(throws: ExecSubscription.ParseError.self) { try ExecSubscription(parsing: "ok.name novalue") }
        #expect(throws: ExecSubscription.ParseError.self) { try ExecSubscription(parsing: "  ") }
    }

    /// Frames as the module's forwarding writes them become the lines a program reads: an event
    /// once however many subscriptions matched it, filtered by its subscription's field
    /// matches, a gap notice as a gap line, a JSON frame as its line.
    @Test func framesBecomeTailLinesOnceEachFilteredAndGapsBecomeGapLines() throws {
        let subscriptions = ExecSubscriptions()
        let lines = ExecLines(format: .host, subscriptions: subscriptions)
        let all = lines.register(try ExecSubscription(parsing: "user.>"))
        let failed = lines.register(try ExecSubscription(parsing: "user.ping n=2"))
        func event(_ sequence: UInt64, _ n: Int64) -> Event {
            Event(name: "user.ping", source: "user", fields: ["n": .int(n)], wallTime: Date(timeIntervalSince1970: 1_700_000_000),
                  monotonicNanoseconds: 7).withSequence(sequence)
        }
        var frames = FrameBuffer()
        frames.append(.start, json: ["type": "hello", "protocol": .int(1)])
        frames.appendEvent(event(1, 1), type: .events, subscription: failed)  // filtered out
        frames.appendEvent(event(1, 1), type: .events, subscription: all)
        frames.appendEvent(event(2, 2), type: .events, subscription: all)
        frames.appendEvent(event(2, 2), type: .events, subscription: failed)  // a copy: sent once
        let gap = Event(name: Gap.eventName, source: "bus", fields: ["dropped": 3, "first_sequence": 3, "last_sequence": 5])
        frames.appendEvent(gap, type: .events, subscription: all)
        var bytes = frames.bytes
        lines.translate(&bytes)
        let text = String(decoding: bytes, as: UTF8.self).split(separator: "\n").map(String.init)
        #expect(text == [
            #"{"protocol":1,"type":"hello"}"#,
            #"{"type":"event","seq":1,"name":"user.ping","source":"user","time":"2023-11-14T22:13:20.000000Z","mono":7,"fields":{"n":1}}"#,
            #"{"type":"event","seq":2,"name":"user.ping","source":"user","time":"2023-11-14T22:13:20.000000Z","mono":7,"fields":{"n":2}}"#,
            #"{"type":"gap","reason":"slow_client","dropped":3,"first_seq":3,"last_seq":5}"#,
        ])
        #expect(lines.taken.load(ordering: .relaxed) == 5)
    }

    func load(_ yaml: String) throws -> HostConfig {
        let directory = try TemporaryDirectory()
        return try HostConfig.load(from: try directory.write("eventbus.yaml", yaml))
    }

    func error(_ yaml: String) throws -> String {
        do {
            _ = try load(yaml)
        } catch {
            return "\(error)"
        }
        Issue.record("loaded:\n\(yaml)")
        return ""
    }

    @Test func anExecEntryIsReadWithItsSubscriptionsAndAllowance() throws {
        let config = try load("""
            modules:
              report:
                exec: ["/usr/bin/python3", "report.py", "--verbose"]
                subscribe: ["user.disk.*", "unit.state active=failed"]
                posts_per_second: 50
                config: { threshold: 90 }
                worker: { restart_delay: 1s, cpu_limit: 1h }
            """)
        let entry = try #require(config.modules.first)
        #expect(entry.path == "/usr/bin/python3")
        #expect(entry.isolation == .process)
        #expect(entry.exec?.program == ["/usr/bin/python3", "report.py", "--verbose"])
        #expect(entry.exec?.subscriptions.map(\.description) == ["user.disk.*", "unit.state active=failed"])
        #expect(entry.exec?.postsPerSecond == 50)
        #expect(entry.worker.cpuLimitSeconds == 3600)
        #expect(entry.config.values["threshold"] != nil)
    }

    @Test func anExecEntryRefusesWhatCannotApplyToAProgram() throws {
        #expect(try error("modules:\n  m:\n    exec: [\"/bin/true\"]\n    path: /x.so\n").contains("either path (a .so) or exec (a program), not both"))
        #expect(try error("modules:\n  m:\n    exec: [\"/bin/true\"]\n    isolation: none\n").contains("always runs in a process of its own"))
        #expect(try error("modules:\n  m:\n    exec: [\"/bin/true\"]\n    worker: { heartbeat_timeout: 5s }\n").contains("sends no heartbeat"))
        #expect(try error("modules:\n  m:\n    exec: [\"/bin/true\"]\n    subscribe: [\"a..b\"]\n").contains("modules.m.subscribe[0]"))
        #expect(try error("modules:\n  m:\n    exec: []\n").contains("exec is the program and its arguments"))
        #expect(try error("modules:\n  m:\n    path: /x.so\n    subscribe: [\"a.b\"]\n").contains("only an exec module (one with exec:) has subscribe"))
        #expect(try error("modules:\n  m:\n    config: {}\n").contains("a module needs a path (its .so file) or exec"))
    }

    @Test func aProgramIsTrustedAsAModuleFileIs() throws {
        let directory = try TemporaryDirectory()
        let program = try directory.write("module.sh", "#!/bin/sh\n")
        #expect(HostConfig.execProblem(ExecSettings(program: [program]))?.contains("not executable") == true)
        chmod(program, 0o757)
        #expect(HostConfig.execProblem(ExecSettings(program: [program]))?.contains("writable by every user") == true)
        chmod(program, 0o755)
        #expect(HostConfig.execProblem(ExecSettings(program: [program])) == nil)
        #expect(HostConfig.execProblem(ExecSettings(program: [directory.path + "/missing"]))?.hasPrefix("cannot run") == true)
    }

    @Test func aChangedExecRestartsTheModuleOnReload() {
        var running = ModuleEntry(name: "m", path: "/bin/prog", location: "f:1")
        running.exec = ExecSettings(program: ["/bin/prog"])
        var changed = running
        changed.exec?.program.append("--verbose")
        let current = ["m": ModulePlan.Current(entry: running, isActive: true, mailbox: MailboxLimits())]
        #expect(ModulePlan.actions(current: current, desired: [changed], defaultMailbox: MailboxLimits())
                == [.restart(name: "m", reason: "exec settings changed")])
        #expect(ModulePlan.actions(current: current, desired: [running], defaultMailbox: MailboxLimits()).isEmpty)
    }
}
