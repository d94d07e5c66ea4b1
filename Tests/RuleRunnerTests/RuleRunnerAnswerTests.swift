import RuleActions
import RuleRunnerProtocol
import Testing

/// The runner's answers as bytes: each decodes to itself; what is not an answer is a
/// connection error the client reports, never a made-up outcome.
@Suite struct RuleRunnerAnswerTests {
    static let answers: [RuleRunnerAnswer] = [
        .started(CommandStart(pid: 4242, unit: "eventbus-rule-r-ab-1.service")),
        .started(CommandStart(pid: nil, unit: nil)),
        .finished(CommandOutcome(termination: .exited(0), duration: .milliseconds(1500), outputTail: ["done", "ünï \"q\""])),
        .finished(CommandOutcome(termination: .exited(3), duration: .nanoseconds(1))),
        .finished(CommandOutcome(termination: .signalled(9), duration: .seconds(2))),
        .finished(CommandOutcome(termination: .timedOut, duration: .seconds(30))),
        .finished(CommandOutcome(termination: .stopped, duration: .zero)),
        .finished(CommandOutcome(termination: .failedToStart("no user named \"x\""), duration: .zero)),
        .error(RuleRunnerError(.noSuchRule, "no rule \"x\" in /etc/eventbus/eventbus.yaml")),
    ]

    @Test(arguments: answers)
    func anAnswerDecodesToItself(_ answer: RuleRunnerAnswer) {
        let line = answer.line
        #expect(line.last == UInt8(ascii: "\n"))
        #expect(Array(line.dropLast()).withUnsafeBufferPointer(RuleRunnerAnswer.decode) == .success(answer))
    }

    @Test(arguments: RuleRunnerError.Code.allCases)
    func everyErrorCodeCrossesTheWire(_ code: RuleRunnerError.Code) {
        let answer = RuleRunnerAnswer.error(RuleRunnerError(code, "why"))
        #expect(Array(answer.line.dropLast()).withUnsafeBufferPointer(RuleRunnerAnswer.decode) == .success(answer))
    }

    @Test(arguments: [
        "", "nonsense", "[]", #"{"type":"launched"}"#, #"{"type":"finished","termination":"exited","duration_ns":1,"output":[]}"#,
        #"{"type":"finished","termination":"exploded","status":0,"duration_ns":1,"output":[]}"#,
        #"{"type":"finished","termination":"exited","status":0}"#, #"{"type":"error","code":"whatever","message":"m"}"#,
        #"{"type":"finished","termination":"exited","status":99999999999,"duration_ns":1,"output":[]}"#,
    ])
    func somethingElseIsAConnectionError(_ line: String) {
        guard case .failure(let error) = Array(line.utf8).withUnsafeBufferPointer(RuleRunnerAnswer.decode) else {
            Issue.record("decoded: \(line)")
            return
        }
        #expect(error.code == .connection)
    }
}
