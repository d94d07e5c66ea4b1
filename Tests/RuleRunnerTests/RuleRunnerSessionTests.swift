import RuleActions
import RuleRunnerProtocol
import Testing

/// The runner's connection as a state machine: every order of requests, the client's end and
/// the run's progress leads to one answer per event and one close.
@Suite struct RuleRunnerSessionTests {
    static let request = RuleRunRequest(rule: "r", action: 1, run: "a-1", events: [["type": "event"]])
    static let start = CommandStart(pid: 10, unit: "eventbus-rule-r-a-1.service")
    static let outcome = CommandOutcome(termination: .exited(0), duration: .seconds(1))

    @Test func aRunIsStartedAnsweredAndClosed() {
        var session = RuleRunnerSession()
        #expect(session.handle(.line(.success(.run(Self.request)))) == [.startRun(Self.request)])
        #expect(session.handle(.started(Self.start)) == [.answer(.started(Self.start))])
        #expect(session.handle(.finished(Self.outcome)) == [.answer(.finished(Self.outcome)), .close])
        #expect(session.state == .closed)
        #expect(session.handle(.clientClosed) == [])
        #expect(session.handle(.line(.success(.stop))) == [])
    }

    @Test func stopAndTheClientsEndStopTheRunOnceAndItsOutcomeIsStillAnswered() {
        for ending in [RuleRunnerSession.Input.line(.success(.stop)), .clientClosed] {
            var session = RuleRunnerSession()
            _ = session.handle(.line(.success(.run(Self.request))))
            #expect(session.handle(ending) == [.stopRun])
            #expect(session.handle(.line(.success(.stop))) == [])
            #expect(session.handle(.clientClosed) == [])
            let stopped = CommandOutcome(termination: .stopped, duration: .zero)
            #expect(session.handle(.finished(stopped)) == [.answer(.finished(stopped)), .close])
        }
    }

    @Test func aRefusedRunIsAnErrorAnswerLoggedAndTheEnd() {
        let error = RuleRunnerError(.noSuchRule, "no rule \"x\"")
        var session = RuleRunnerSession()
        _ = session.handle(.line(.success(.run(Self.request))))
        #expect(session.handle(.refused(error)) == [.log(error), .answer(.error(error)), .close])
        #expect(session.state == .closed)
    }

    @Test func aBadFirstLineOrAStopFirstIsAnErrorAndTheEnd() {
        let bad = RuleRunnerError(.badRequest, "not JSON")
        var first = RuleRunnerSession()
        #expect(first.handle(.line(.failure(bad))) == [.log(bad), .answer(.error(bad)), .close])
        var second = RuleRunnerSession()
        guard case .answer(.error(let error)) = second.handle(.line(.success(.stop)))[1] else {
            Issue.record("no error answer")
            return
        }
        #expect(error.code == .badRequest)
        #expect(second.state == .closed)
    }

    @Test func aRefusedPeerIsAnErrorBeforeAnyLine() {
        let refused = RuleRunnerError(.refusedPeer, "uid 1000")
        var session = RuleRunnerSession()
        #expect(session.handle(.refused(refused)) == [.log(refused), .answer(.error(refused)), .close])
    }

    @Test func aSecondRunOrAGarbledLineDuringARunStopsIt() {
        let garbled = RuleRunnerError(.lineTooLong, "a line longer than 4194304 bytes")
        for line in [Result<RuleRunnerRequest, RuleRunnerError>.success(.run(Self.request)), .failure(garbled)] {
            var session = RuleRunnerSession()
            _ = session.handle(.line(.success(.run(Self.request))))
            let effects = session.handle(.line(line))
            #expect(effects.last == .stopRun)
            #expect(effects.contains { if case .answer(.error) = $0 { true } else { false } })
            #expect(session.state == .stopping)
            #expect(session.handle(.finished(Self.outcome)) == [.answer(.finished(Self.outcome)), .close])
        }
    }

    @Test func aClientGoneBeforeItsRequestClosesQuietly() {
        var session = RuleRunnerSession()
        #expect(session.handle(.clientClosed) == [.close])
    }
}
