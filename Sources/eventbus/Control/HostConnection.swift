import ArgumentParser
import ControlProtocol
import Foundation

/// `--socket`: the option every command that talks to eventbusd shares.
struct SocketOptions: ParsableArguments {
    @Option(name: .customLong("socket"),
            help: ArgumentHelp("eventbusd's control socket (default: $\(ControlProtocol.socketEnvironmentVariable), else \(ControlProtocol.systemSocketPath) for root and members of its group, or the per-user eventbusd's $XDG_RUNTIME_DIR/eventbus/control.sock).",
                               valueName: "path"))
    var path: String?

    /// Connects and checks the host's greeting.
    func connect() throws -> HostConnection {
        try HostConnection(path: resolvedPath)
    }

    /// As ``connect()``, but a host that is restarting — its socket refuses connections, or it
    /// closes before greeting — is waited for, up to `patience`.
    func connect(waitingUpTo patience: Duration) throws -> HostConnection {
        try HostConnection.waiting(upTo: patience) { try HostConnection(path: resolvedPath) }
    }

    var resolvedPath: String { path ?? ControlProtocol.clientSocketPath() }

    /// How long a request that may safely be asked twice waits for a restarting host.
    static let restartPatience = Duration.seconds(15)

    /// Asks a request that changes nothing when asked twice (status, modules, listing, metrics,
    /// reload): a host that is restarting is waited for, and a connection that breaks before
    /// the answer (a stopping host closing it) is asked again, within ``restartPatience``.
    func ask(_ request: ControlRequest) throws -> JSON {
        try HostConnection.waiting(upTo: Self.restartPatience) {
            let host = try HostConnection(path: resolvedPath)
            do {
                try host.connection.send(request.line)
                guard let response = try host.connection.readJSON() else {
                    throw HostConnection.Restarting(description: "eventbusd closed the connection without answering")
                }
                try HostConnection.throwIfError(response)
                return response
            } catch let error as ControlConnection.IOError {
                throw HostConnection.Restarting(description: "eventbusd's connection broke (\(error))")
            }
        }
    }
}

/// A connection to eventbusd, greeted: the host's `hello` was read and its protocol checked.
struct HostConnection {
    let connection: ControlConnection
    /// The host's process id, from its greeting.
    let hostProcessID: Int64?
    /// The host's life (``EventCursor``), from its greeting: a different one after a reconnect
    /// means the host restarted and numbers its events anew (a pid can come back; a life cannot).
    let hostLife: String?

    /// A failure a restarting host causes and a moment later no longer does: nothing accepts on
    /// the socket file, the host closed before greeting, or it refused a request because it is
    /// shutting down.
    struct Restarting: Error, CustomStringConvertible {
        var description: String
        /// The host said it is shutting down (`shutting_down`, or `end` instead of an answer).
        var hostSaidStopping = false
        /// No socket file: no host runs — unless one just said it is stopping. A host that bound
        /// its socket removes it at the end of its shutdown, before the next one binds it again.
        var noSocket = false
    }

    init(path: String) throws {
        do {
            connection = try ControlConnection(path: path)
        } catch .notListening(let path) {
            throw Restarting(description: ControlConnection.ConnectError.notListening(path: path).description)
        } catch .noSocket(let path) {
            throw Restarting(description: ControlConnection.ConnectError.noSocket(path: path).description, noSocket: true)
        } catch {
            throw CommandError(error.description)
        }
        let greeting: JSON?
        do {
            greeting = try connection.readJSON()
        } catch let error as ControlConnection.IOError {
            throw Restarting(description: "eventbusd closed the connection before greeting (\(error))")
        }
        guard let greeting else { throw Restarting(description: "eventbusd closed the connection before greeting") }
        let hello: Hello
        switch try? ControlResponse.decode(greeting) {
        case .hello(let greeted)?: hello = greeted
        case .error(let refusal)?:
            // Not admitted (too many clients, or eventbusd is out of descriptors): it says why.
            throw CommandError("eventbusd refused the connection: \(refusal.message)")
        default:
            throw CommandError("\(path) did not greet like eventbusd (no hello line)")
        }
        guard hello.protocolVersion == ControlProtocol.version else {
            throw CommandError("eventbusd speaks control protocol \(hello.protocolVersion); this eventbus speaks \(ControlProtocol.version): use the eventbus that came with this eventbusd")
        }
        hostProcessID = hello.processID
        hostLife = hello.life
    }

    /// Runs `attempt` until it does not fail with ``Restarting``, for at most `patience`
    /// (systemd restarts eventbusd within a few seconds), saying once on standard error why it
    /// waits. The last failure is thrown, saying when a host had said it was shutting down. A
    /// missing socket file ends the wait at once (no host runs), except after a host said it is
    /// shutting down: then it is the gap between that host and the next.
    static func waiting<T>(upTo patience: Duration, _ attempt: () throws -> T) throws -> T {
        let deadline = ContinuousClock.now + patience
        var pause = Duration.milliseconds(50)
        var hostSaidStopping = false
        var told = false
        while true {
            do {
                return try attempt()
            } catch let restarting as Restarting {
                hostSaidStopping = hostSaidStopping || restarting.hostSaidStopping
                guard !restarting.noSocket || hostSaidStopping, ContinuousClock.now + pause < deadline else {
                    let seen = restarting.hostSaidStopping || !hostSaidStopping ? "" : " (eventbusd said it was shutting down; no other answered in time)"
                    throw CommandError(restarting.description + seen)
                }
                if !told { printError("eventbus: waiting for eventbusd: \(restarting.description)") }
                told = true
                Thread.sleep(forTimeInterval: Double(pause.components.attoseconds) / 1e18 + Double(pause.components.seconds))
                pause = min(pause * 2, .milliseconds(500))
            }
        }
    }

    /// Sends `request` and returns the host's answer; an `error` answer is thrown.
    func request(_ request: ControlRequest) throws -> JSON {
        try connection.send(request.line)
        guard let response = try connection.readJSON() else {
            throw CommandError("eventbusd closed the connection without answering")
        }
        try Self.throwIfError(response)
        return response
    }

    /// A `forbidden` error is phrased as a refusal, `shutting_down` is ``Restarting``, others
    /// are eventbusd's complaint. So is an `end` line in the place of an answer: a stopping
    /// host ended the connection before it read the request, which it did not carry out.
    static func throwIfError(_ response: JSON) throws {
        let failure: ControlError
        switch try? ControlResponse.decode(response) {
        case .error(let error)?: failure = error
        case .end(let reason)?:
            throw Restarting(description: "eventbusd ended the connection before answering (\(reason))", hostSaidStopping: true)
        default: return
        }
        switch failure.code {
        case .forbidden: throw CommandError("eventbusd refused: \(failure.message)")
        case .shuttingDown: throw Restarting(description: "eventbusd: \(failure.message)", hostSaidStopping: true)
        default: throw CommandError("eventbusd: \(failure.message)")
        }
    }

    /// The answer, typed; an answer that is not what `expected` names is an error.
    static func decode<Answer>(_ response: JSON, as expected: String, _ pick: (ControlResponse) -> Answer?) throws -> Answer {
        let decoded: ControlResponse
        do { decoded = try ControlResponse.decode(response) } catch { throw CommandError("eventbusd's \(expected) answer: \(error)") }
        guard let answer = pick(decoded) else { throw CommandError("eventbusd answered a \(expected) request with something else") }
        return answer
    }
}
