import ArgumentParser
import ControlProtocol
import EventBusHost
import Glibc

/// `eventbus-rule-runner`: started by systemd for each connection to
/// `eventbus-rule-runner.socket` (`Accept=yes`), as root, with the connection as its one
/// inherited socket. Runs the one rule action it is asked for as a transient unit, built from
/// the root-owned config, and exits (docs/rules-privileges.md).
///
/// Why one process per connection: a run is a connection, so nothing of one run (its state,
/// a crash) reaches another, and `MaxConnections=` of the socket bounds how many run at once.
struct RuleRunnerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "eventbus-rule-runner",
        abstract: "Run one action of one EventBus rule as a transient systemd unit, for eventbusd.",
        discussion: """
        Started by systemd for each connection to eventbus-rule-runner.socket, as root. The \
        client names only a rule, an action and the triggering events; the command, its user \
        and its unit properties come from the config, which must be root's.
        """,
        version: "eventbus-rule-runner \(ControlProtocol.versionLine)")

    @Option(help: "The host config whose rules may run (root-owned, as eventbusd's).")
    var config: String = HostConfig.defaultPath

    @Option(name: .customLong("client-user"), help: "The user, besides root, who may ask for runs.")
    var clientUser: String = "eventbus"

    func run() throws {
        let activation = SocketActivation.take()
        guard activation.sockets.count == 1, let socket = activation.sockets.first else {
            let why = activation.ignoredReason ?? "\(activation.sockets.count) sockets passed"
            RunnerLog.error("eventbus-rule-runner runs from eventbus-rule-runner.socket (Accept=yes), with one connection: \(why)")
            throw ExitCode(2)
        }
        RunnerConnection(fd: socket.fileDescriptor, configPath: config, clientUser: clientUser).serve()
    }
}

RuleRunnerCommand.main()
