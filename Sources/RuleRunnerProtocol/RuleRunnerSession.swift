import RuleActions

/// The rule runner's side of one connection, as a pure state machine: what comes in (a request
/// line, the client's end, the run's start and end, a refused run) and what to do about it. The
/// runner carries out the effects; this decides them, so every order of events is tested
/// without a socket or systemd.
///
/// One connection is one run: the first line must be a `run`; a `stop` or the client's end
/// stops it; a run's end is answered and closes the connection. Whatever else the client sends
/// is an error answer, and stops a run under way (a client that breaks the protocol is not
/// trusted to be waiting for its outcome).
public struct RuleRunnerSession: Sendable, Equatable {
    public enum State: Sendable, Equatable {
        case awaitingRequest
        case running
        /// Stop asked for; waiting for the run's end.
        case stopping
        case closed
    }

    public enum Input: Sendable, Equatable {
        case line(Result<RuleRunnerRequest, RuleRunnerError>)
        /// The client closed its side (or its connection failed).
        case clientClosed
        case started(CommandStart)
        case finished(CommandOutcome)
        /// The run could not be started: no such rule or action, a bad event, no systemd.
        case refused(RuleRunnerError)
    }

    public enum Effect: Sendable, Equatable {
        case startRun(RuleRunRequest)
        case stopRun
        case answer(RuleRunnerAnswer)
        /// Log the error the client is told (or would be, had it not gone).
        case log(RuleRunnerError)
        case close
    }

    public private(set) var state = State.awaitingRequest

    public init() {}

    public mutating func handle(_ input: Input) -> [Effect] {
        switch (state, input) {
        case (.closed, _):
            return []
        case (.awaitingRequest, .line(.success(.run(let request)))):
            state = .running
            return [.startRun(request)]
        case (.awaitingRequest, .line(.success(.stop))):
            return end(RuleRunnerError(.badRequest, "stop before any run: the first request of a connection is run"))
        case (.awaitingRequest, .line(.failure(let error))), (.awaitingRequest, .refused(let error)):
            return end(error)
        case (.awaitingRequest, .clientClosed):
            state = .closed
            return [.close]
        case (.awaitingRequest, .started), (.awaitingRequest, .finished):
            return []  // no run: cannot happen
        case (.running, .line(.success(.stop))), (.running, .clientClosed):
            state = .stopping
            return [.stopRun]
        case (.running, .line(.success(.run))):
            let error = RuleRunnerError(.badRequest, "one run per connection: a second run was refused, and the first is stopped")
            state = .stopping
            return [.log(error), .answer(.error(error)), .stopRun]
        case (.running, .line(.failure(let error))):
            state = .stopping
            return [.log(error), .answer(.error(error)), .stopRun]
        case (.running, .started(let start)), (.stopping, .started(let start)):
            return [.answer(.started(start))]
        case (.running, .finished(let outcome)), (.stopping, .finished(let outcome)):
            state = .closed
            return [.answer(.finished(outcome)), .close]
        case (.running, .refused(let error)), (.stopping, .refused(let error)):
            return end(error)
        case (.stopping, .line), (.stopping, .clientClosed):
            return []
        }
    }

    private mutating func end(_ error: RuleRunnerError) -> [Effect] {
        state = .closed
        return [.log(error), .answer(.error(error)), .close]
    }
}
