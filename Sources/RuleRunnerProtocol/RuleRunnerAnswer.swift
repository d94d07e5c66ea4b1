import ControlProtocol
import RuleActions

/// What the rule runner tells its client about one run: where the unit runs, how it ended, or
/// why there is no run.
public enum RuleRunnerAnswer: Sendable, Equatable {
    case started(CommandStart)
    case finished(CommandOutcome)
    /// The last answer of a connection that runs nothing (any more).
    case error(RuleRunnerError)

    /// The answer as one line, newline included.
    public var line: [UInt8] {
        switch self {
        case .started(let start):
            var members: [String: JSON] = ["type": "started"]
            if let unit = start.unit { members["unit"] = .string(unit) }
            if let pid = start.pid { members["pid"] = .int(Int64(pid)) }
            return JSONWriter.line(.object(members))
        case .finished(let outcome):
            var members: [String: JSON] = ["type": "finished", "output": .array(outcome.outputTail.map(JSON.string))]
            let (seconds, attoseconds) = outcome.duration.components
            members["duration_ns"] = .int(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
            switch outcome.termination {
            case .exited(let status): members["termination"] = "exited"; members["status"] = .int(Int64(status))
            case .signalled(let signal): members["termination"] = "signalled"; members["signal"] = .int(Int64(signal))
            case .timedOut: members["termination"] = "timeout"
            case .stopped: members["termination"] = "stopped"
            case .failedToStart(let reason): members["termination"] = "failed"; members["reason"] = .string(reason)
            }
            return JSONWriter.line(.object(members))
        case .error(let error):
            return JSONWriter.line(["type": "error", "code": .string(error.code.rawValue), "message": .string(error.message)])
        }
    }

    /// Decodes one line (without its newline); what is not an answer is a ``RuleRunnerError/Code/connection`` error.
    public static func decode(_ line: UnsafeBufferPointer<UInt8>) -> Result<RuleRunnerAnswer, RuleRunnerError> {
        func bad(_ message: String) -> Result<RuleRunnerAnswer, RuleRunnerError> {
            .failure(RuleRunnerError(.connection, "the rule runner answered something else: \(message)"))
        }
        let value: JSON
        do throws(JSONParseError) { value = try JSON.parse(line) } catch { return bad("not JSON: \(error)") }
        switch value["type"]?.stringValue {
        case "started":
            let pid = value["pid"]?.intValue.flatMap { Int32(exactly: $0) }
            return .success(.started(CommandStart(pid: pid, unit: value["unit"]?.stringValue)))
        case "finished":
            guard let nanoseconds = value["duration_ns"]?.intValue, let output = value["output"]?.arrayValue else {
                return bad("a finished answer without duration_ns or output")
            }
            let termination: CommandOutcome.Termination
            switch value["termination"]?.stringValue {
            case "exited":
                guard let status = value["status"]?.intValue.flatMap({ Int32(exactly: $0) }) else { return bad("exited without a status") }
                termination = .exited(status)
            case "signalled":
                guard let signal = value["signal"]?.intValue.flatMap({ Int32(exactly: $0) }) else { return bad("signalled without a signal") }
                termination = .signalled(signal)
            case "timeout": termination = .timedOut
            case "stopped": termination = .stopped
            case "failed": termination = .failedToStart(value["reason"]?.stringValue ?? "(no reason given)")
            default: return bad("an unknown termination")
            }
            return .success(.finished(CommandOutcome(termination: termination, duration: .nanoseconds(nanoseconds),
                                                     outputTail: output.compactMap(\.stringValue))))
        case "error":
            guard let code = value["code"]?.stringValue.flatMap(RuleRunnerError.Code.init(rawValue:)),
                  let message = value["message"]?.stringValue else { return bad("an error without a known code or a message") }
            return .success(.error(RuleRunnerError(code, message)))
        default:
            return bad("no known \"type\"")
        }
    }
}
