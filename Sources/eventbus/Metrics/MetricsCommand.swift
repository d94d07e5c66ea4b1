import ArgumentParser
import ControlProtocol

/// `eventbus metrics`: the host's metrics in Prometheus's text format, through the control
/// socket — the same text `metrics.listen` serves over HTTP, without a port.
struct MetricsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "metrics",
        abstract: "Print the running eventbusd's metrics (Prometheus text format), as /metrics serves them.")

    @OptionGroup var socket: SocketOptions

    func run() throws {
        print(try Self.text(of: socket.ask(["op": "metrics"])), terminator: "")
    }

    static func text(from host: HostConnection) throws -> String {
        try text(of: host.request(["op": "metrics"]))
    }

    private static func text(of answer: JSON) throws -> String {
        guard let text = answer["text"]?.stringValue else {
            throw CommandError("eventbusd answered a metrics request without text")
        }
        return text
    }
}
