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
        let answer = try socket.ask(ControlRequest(.metrics))
        print(try HostConnection.decode(answer, as: "metrics") { if case .metrics(let text) = $0 { text } else { nil } }, terminator: "")
    }
}
