import ControlProtocol
import Foundation
import RuleActions
import SystemCalls

/// Runs rules' commands as transient units through `eventbus-rule-runner`, the root helper, for
/// an eventbusd that systemd will not let start units itself (the packaged one, user
/// `eventbus`; docs/rules-privileges.md).
///
/// It sends the runner only which action of which rule to run and the triggering events (the
/// spec's ``CommandSpec/origin`` and ``CommandSpec/standardInput``); the runner builds the
/// command itself from the root-owned config. Everything else in the spec — argv, user,
/// properties — is eventbusd's own copy and is not sent: the unit runs what root configured,
/// whatever eventbusd believes.
///
/// Each run is a connection of its own, on a thread of its own (blocking reads; ``RuleRunnerCall``).
public final class RuleRunnerLauncher: CommandLauncher {
    public let kind = "systemd"
    public let supportsUnitProperties = true
    /// The runner's socket.
    public let path: String

    public init(path: String = RuleRunnerProtocol.socketPath) {
        self.path = path
    }

    /// Whether something accepts connections at `path` (the connection is closed at once; the
    /// runner takes a connection without a request for nothing).
    public static func isListening(at path: String = RuleRunnerProtocol.socketPath) -> Bool {
        guard case .success(let fd) = UnixStream.connect(to: path) else { return false }
        System.close(fd)
        return true
    }

    public func run(_ spec: CommandSpec, started: @escaping @Sendable (CommandStart) -> Void) async -> CommandOutcome {
        let request: RuleRunnerRequest
        switch Self.request(for: spec) {
        case .success(let made): request = made
        case .failure(let error): return CommandOutcome(termination: .failedToStart(error.message), duration: .zero)
        }
        let call = RuleRunnerCall(path: path, request: request, started: started)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                call.start { continuation.resume(returning: $0) }
            }
        } onCancel: {
            call.stop()
        }
    }

    /// The `run` request for `spec`: its origin, and its standard input's event lines as objects.
    static func request(for spec: CommandSpec) -> Result<RuleRunnerRequest, RuleRunnerError> {
        guard let origin = spec.origin else {
            return .failure(RuleRunnerError(.badRequest, "the rule runner runs only rules' actions, and this command names none"))
        }
        var events: [JSON] = []
        for line in spec.standardInput.split(separator: UInt8(ascii: "\n")) {
            let parsed = Array(line).withUnsafeBufferPointer { bytes in Result { () throws(JSONParseError) in try JSON.parse(bytes) } }
            guard case .success(let event) = parsed else {
                return .failure(RuleRunnerError(.badEvent, "the triggering events are not JSON lines"))
            }
            events.append(event)
        }
        let request = RuleRunnerRequest.run(RuleRunRequest(rule: origin.rule, action: origin.action, run: origin.run, events: events))
        guard request.line.count <= RuleRunnerProtocol.maximumLineBytes else {
            return .failure(RuleRunnerError(.lineTooLong, "the triggering events take more than the rule runner's \(RuleRunnerProtocol.maximumLineBytes) bytes a request"))
        }
        return .success(request)
    }
}
