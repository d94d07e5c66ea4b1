import ArgumentParser
import ControlProtocol
import SystemCalls

/// `eventbus`: the command line of the EventBus host. Each group of subcommands lives in its own
/// folder; the ones that talk to a running host (`Control/`: tail, post, status, modules, files, reload;
/// `Metrics/`: metrics, top) and
/// the module tools (`Module/`) join `subcommands` here.
@main
struct EventBusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "eventbus",
        abstract: "Work with the EventBus host and its handler modules.",
        version: "eventbus \(ControlProtocol.versionLine)",
        subcommands: [TailCommand.self, PostCommand.self, StatusCommand.self, ModulesCommand.self, FilesCommand.self,
                      MetricsCommand.self, TopCommand.self, ReloadCommand.self, RulesCommand.self, ModuleCommand.self]
    )

    static func main() {
        System.unblockTerminationSignals()
        main(LeadingSocketOption.reordered(Array(CommandLine.arguments.dropFirst())))
    }
}
