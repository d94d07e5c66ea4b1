import ControlProtocol
import Dispatch
import EventBusHost
import Foundation
import Glibc
import RuleActions
import RuleRunnerProtocol
import SystemCalls
import TransientUnits

/// One client connection of the runner, from its first line to its close: reads requests on a
/// thread of its own, feeds them and the run's progress to a ``RuleRunnerSession``, and carries
/// out what the session decides — on one serial queue, so answers never interleave and the
/// session sees one input at a time.
final class RunnerConnection: @unchecked Sendable {
    // @unchecked: `session` and `run` are touched only on `queue`.
    private let fd: Int32
    private let configPath: String
    private let clientUser: String
    private let queue = DispatchQueue(label: "eventbus.rule-runner.connection")
    private var session = RuleRunnerSession()
    private var run: Task<Void, Never>?
    private let closed = DispatchSemaphore(value: 0)
    private var peer = "peer"

    /// How long a client has to send its request after connecting.
    static let requestTimeout = Duration.seconds(30)

    init(fd: Int32, configPath: String, clientUser: String) {
        self.fd = fd
        self.configPath = configPath
        self.clientUser = clientUser
    }

    /// Serves the connection; returns once it is closed.
    func serve() {
        switch PeerCredentials.of(fd) {
        case .failure(let error):
            feed(.refused(error))
        case .success(let credentials):
            peer = "uid \(credentials.uid) pid \(credentials.pid)"
            if let refusal = credentials.refusal(clientUser: clientUser) {
                feed(.refused(refusal))
            } else {
                let thread = Thread { [self] in readRequests() }
                thread.name = "eventbus.rule-runner.read"
                thread.start()
            }
        }
        closed.wait()
    }

    private func readRequests() {
        Self.setReceiveTimeout(fd, Self.requestTimeout)
        var lines = BoundedLineReader(fd: fd)
        var first = true
        while true {
            switch lines.next() {
            case .success(nil):
                feed(.clientClosed)
                return
            case .success(let line?):
                if first {
                    Self.setReceiveTimeout(fd, nil)  // the run may take its time; the client waits
                    first = false
                }
                feed(.line(line.withUnsafeBufferPointer(RuleRunnerRequest.decode)))
            case .failure(let error):
                // The stream cannot be read on after this: the session answers, and stops a run.
                feed(.line(.failure(error)))
                feed(.clientClosed)
                return
            }
        }
    }

    private func feed(_ input: RuleRunnerSession.Input) {
        queue.async { [self] in
            for effect in session.handle(input) { perform(effect) }
        }
    }

    private func perform(_ effect: RuleRunnerSession.Effect) {
        switch effect {
        case .startRun(let request):
            run = Task.detached { [self] in await carry(out: request) }
        case .stopRun:
            run?.cancel()
        case .answer(let answer):
            UnixStream.write(answer.line, to: fd)
        case .log(let error):
            if error.code == .refusedPeer || error.code == .badRequest || error.code == .lineTooLong {
                RunnerLog.warning("refused \(peer): \(error)")
            } else {
                RunnerLog.error("no run for \(peer): \(error)")
            }
        case .close:
            try? System.shutdown(fd, .both)
            closed.signal()
        }
    }

    /// Finds the action in the config as it is on disk now, builds its command, and runs it as a
    /// transient unit.
    private func carry(out request: RuleRunRequest) async {
        let config: HostConfig
        do throws(ConfigError) {
            // The rules that parsed: a mistake elsewhere in the file (which eventbusd would
            // refuse at its next reload) does not stop the rules that stand.
            config = try HostConfig.loadCollecting(from: configPath).config
        } catch {
            return feed(.refused(RuleRunnerError(.config, error.description)))
        }
        let spec: CommandSpec
        switch config.ruleActionCommand(rule: request.rule, action: request.action, run: request.run, events: request.events) {
        case .success(let made): spec = made
        case .failure(let error): return feed(.refused(error))
        }
        let launcher: TransientUnitLauncher
        switch TransientUnitLauncher.connect() {
        case .success(let connected): launcher = connected
        case .failure(let problem): return feed(.refused(RuleRunnerError(.unavailable, problem.message)))
        }
        if Task.isCancelled { return feed(.finished(CommandOutcome(termination: .stopped, duration: .zero))) }
        RunnerLog.info("rule \(request.rule) action \(request.action) (run \(request.run)) for \(peer): \(spec.unitName) as \(spec.user ?? launcher.defaultUser)")
        let outcome = await launcher.run(spec) { [self] start in feed(.started(start)) }
        RunnerLog.info("rule \(request.rule) action \(request.action) (run \(request.run)): \(spec.unitName) ended, \(outcome.termination)")
        feed(.finished(outcome))
    }

    /// `SO_RCVTIMEO`: a read that waits longer fails with EAGAIN. Nil: wait as long as it takes.
    private static func setReceiveTimeout(_ fd: Int32, _ limit: Duration?) {
        try? System.StreamSocket.setReceiveTimeout(fd, limit)
    }
}
