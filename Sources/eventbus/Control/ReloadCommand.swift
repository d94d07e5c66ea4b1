import ArgumentParser
import ControlProtocol

/// `eventbus reload`: has the running host re-read its config, and says whether it took it.
///
/// Why a command and not `kill -HUP`: a signal cannot answer. systemd's `ExecReload=` runs this,
/// so `systemctl reload eventbusd` fails when the new config is refused (the old one runs on),
/// which is what operators and config management read.
struct ReloadCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "reload",
        abstract: "Have the running eventbusd re-read its config; exit 0 when it was applied, 1 (with the error) when it was refused.",
        discussion: "Needs root or eventbusd's own user. The host keeps running on its old config when the new one is refused.")

    @OptionGroup var socket: SocketOptions

    func run() throws {
        let answer = try socket.ask(ControlRequest(.reload))
        print(try HostConnection.decode(answer, as: "reload") { if case .reloaded(let message) = $0 { message } else { nil } })
    }
}
