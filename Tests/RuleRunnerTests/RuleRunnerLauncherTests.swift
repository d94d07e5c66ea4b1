import ControlProtocol
import Foundation
import Glibc
import RuleActions
import RuleRunnerProtocol
import TestSupport
import Testing

/// eventbusd's side against a stand-in runner on a real Unix socket: what it sends is only the
/// rule action and the events, it reports `started` and the outcome it is told, it asks for a
/// stop when its task is cancelled, and a runner that refuses or vanishes is a failed start.
@Suite struct RuleRunnerLauncherTests {
    /// A listening socket in a temporary folder; `serve` runs once on the one connection.
    final class StandInRunner: @unchecked Sendable {
        let directory: TemporaryDirectory
        let path: String
        let listener: Int32
        let received = Collected<[[UInt8]]>([])

        init() throws {
            directory = try TemporaryDirectory()
            path = directory.at("runner.sock")
            listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.utf8) }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard bound == 0, listen(listener, 4) == 0 else { throw POSIXError(.EADDRINUSE) }
        }

        deinit { close(listener) }

        /// Accepts one connection on a thread and hands it, with its line reader, to `body`.
        func serve(_ body: @escaping @Sendable (Int32, inout BoundedLineReader, StandInRunner) -> Void) {
            Thread { [self] in
                let fd = accept(listener, nil, nil)
                var lines = BoundedLineReader(fd: fd)
                body(fd, &lines, self)
                close(fd)
            }.start()
        }

        func read(_ lines: inout BoundedLineReader) -> RuleRunnerRequest? {
            guard case .success(let line?) = lines.next() else { return nil }
            received.update { $0.append(line) }
            return try? line.withUnsafeBufferPointer(RuleRunnerRequest.decode).get()
        }
    }

    static let eventLine = #"{"type":"event","seq":5,"name":"deploy.done","source":"user","time":"2026-11-29T08:00:00.000001Z","mono":9,"fields":{"path":"/x"}}"# + "\n"

    static func spec(origin: CommandOrigin? = CommandOrigin(rule: "reload", action: 2, run: "ab-3")) -> CommandSpec {
        CommandSpec(argv: ["/bin/sh", "-c", "eventbusd's own idea"], standardInput: Array((eventLine + eventLine).utf8),
                    user: "root", unitName: "eventbus-rule-reload-ab-3.service", origin: origin)
    }

    @Test func itSendsOnlyTheActionAndTheEventsAndReportsWhatTheRunnerSays() async throws {
        let runner = try StandInRunner()
        let outcome = CommandOutcome(termination: .exited(4), duration: .milliseconds(20), outputTail: ["out"])
        runner.serve { fd, lines, runner in
            guard case .run = runner.read(&lines) else { return }
            UnixStream.write(RuleRunnerAnswer.started(CommandStart(pid: 77, unit: "eventbus-rule-reload-ab-3.service")).line, to: fd)
            UnixStream.write(RuleRunnerAnswer.finished(outcome).line, to: fd)
        }
        let starts = Collected<[CommandStart]>([])
        let result = await RuleRunnerLauncher(path: runner.path).run(Self.spec()) { start in starts.update { $0.append(start) } }
        #expect(result == outcome)
        #expect(starts.value == [CommandStart(pid: 77, unit: "eventbus-rule-reload-ab-3.service")])
        let sent = try #require(runner.received.value.first)
        let event = try Array(Self.eventLine.utf8.dropLast()).withUnsafeBufferPointer { try JSON.parse($0) }
        #expect(sent.withUnsafeBufferPointer(RuleRunnerRequest.decode)
                == .success(.run(RuleRunRequest(rule: "reload", action: 2, run: "ab-3", events: [event, event]))))
        let text = String(decoding: sent, as: UTF8.self)
        #expect(!text.contains("/bin/sh") && !text.contains("root"), "\(text)")
    }

    @Test func cancellingTheRunSendsStopAndTheOutcomeIsTheRunners() async throws {
        let runner = try StandInRunner()
        runner.serve { fd, lines, runner in
            guard case .run = runner.read(&lines) else { return }
            UnixStream.write(RuleRunnerAnswer.started(CommandStart(pid: 1, unit: "u.service")).line, to: fd)
            guard runner.read(&lines) == .stop else { return }
            UnixStream.write(RuleRunnerAnswer.finished(CommandOutcome(termination: .stopped, duration: .seconds(1))).line, to: fd)
        }
        let started = AsyncStream<Void>.makeStream()
        let task = Task {
            await RuleRunnerLauncher(path: runner.path).run(Self.spec()) { _ in started.continuation.yield() }
        }
        for await _ in started.stream { break }
        task.cancel()
        #expect(await task.value.termination == .stopped)
        #expect(runner.received.value.count == 2)
    }

    @Test func aRefusalIsAFailedStartWithTheRunnersWords() async throws {
        let runner = try StandInRunner()
        runner.serve { fd, lines, runner in
            _ = runner.read(&lines)
            UnixStream.write(RuleRunnerAnswer.error(RuleRunnerError(.noSuchRule, "no rule \"reload\" in /etc/eventbus/eventbus.yaml")).line, to: fd)
        }
        let result = await RuleRunnerLauncher(path: runner.path).run(Self.spec()) { _ in }
        guard case .failedToStart(let reason) = result.termination else { throw POSIXError(.EINVAL) }
        #expect(reason.contains("no rule \"reload\""), "\(reason)")
    }

    @Test func aRunnerThatVanishesOrIsNotThereIsAFailedStart() async throws {
        let runner = try StandInRunner()
        runner.serve { _, lines, runner in _ = runner.read(&lines) }
        let vanished = await RuleRunnerLauncher(path: runner.path).run(Self.spec()) { _ in }
        guard case .failedToStart(let reason) = vanished.termination else { throw POSIXError(.EINVAL) }
        #expect(reason.contains("without the run's outcome"), "\(reason)")
        let missing = await RuleRunnerLauncher(path: runner.directory.at("nothing.sock")).run(Self.spec()) { _ in }
        guard case .failedToStart = missing.termination else { throw POSIXError(.EINVAL) }
        #expect(!RuleRunnerLauncher.isListening(at: runner.directory.at("nothing.sock")))
        #expect(RuleRunnerLauncher.isListening(at: runner.path))
    }

    @Test func aCommandThatIsNoRulesActionIsNotSent() async {
        let result = await RuleRunnerLauncher(path: "/nonexistent").run(Self.spec(origin: nil)) { _ in }
        guard case .failedToStart(let reason) = result.termination else {
            Issue.record("\(result)")
            return
        }
        #expect(reason.contains("only rules' actions"))
    }
}
