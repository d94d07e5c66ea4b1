import ArgumentParser
import ControlProtocol

/// `--socket`: the option every command that talks to eventbusd shares.
struct SocketOptions: ParsableArguments {
    @Option(name: .customLong("socket"),
            help: ArgumentHelp("eventbusd's control socket (default: $\(ControlProtocol.socketEnvironmentVariable), else \(ControlProtocol.systemSocketPath) for root and members of its group, or the per-user eventbusd's $XDG_RUNTIME_DIR/eventbus/control.sock).",
                               valueName: "path"))
    var path: String?

    /// Connects and checks the host's greeting.
    func connect() throws -> HostConnection {
        try HostConnection(path: path ?? ControlProtocol.clientSocketPath())
    }
}

/// A connection to eventbusd, greeted: the host's `hello` was read and its protocol checked.
struct HostConnection {
    let connection: ControlConnection

    init(path: String) throws {
        do {
            connection = try ControlConnection(path: path)
        } catch {
            throw CommandError(error.description)
        }
        let greeting = try connection.readJSON()
        if let greeting, greeting["type"]?.stringValue == "error" {
            // Not admitted (too many clients, or eventbusd is out of descriptors): it says why.
            throw CommandError("eventbusd refused the connection: \(greeting["message"]?.stringValue ?? "no reason given")")
        }
        guard let hello = greeting, hello["type"]?.stringValue == "hello" else {
            throw CommandError("\(path) did not greet like eventbusd (no hello line)")
        }
        guard let version = hello["protocol"]?.intValue, version == ControlProtocol.version else {
            throw CommandError("eventbusd speaks control protocol \(hello["protocol"]?.intValue.map { String($0) } ?? "?"); this eventbus speaks \(ControlProtocol.version): use the eventbus that came with this eventbusd")
        }
    }

    /// Sends `request` and returns the host's answer; an `error` answer is thrown.
    func request(_ request: JSON) throws -> JSON {
        try connection.send(request)
        guard let response = try connection.readJSON() else {
            throw CommandError("eventbusd closed the connection without answering")
        }
        try Self.throwIfError(response)
        return response
    }

    /// A `forbidden` error is phrased as a refusal, others as eventbusd's complaint.
    static func throwIfError(_ response: JSON) throws {
        guard response["type"]?.stringValue == "error" else { return }
        let message = response["message"]?.stringValue ?? "unknown error"
        if response["code"]?.stringValue == "forbidden" { throw CommandError("eventbusd refused: \(message)") }
        throw CommandError("eventbusd: \(message)")
    }
}
