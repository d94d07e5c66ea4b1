import ArgumentParser

/// `eventbus`: the command line of the EventBus host. Each group of subcommands lives in its own
/// folder; the ones that talk to a running host (tail, post, status) join `subcommands` here.
@main
struct EventBusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "eventbus",
        abstract: "Work with the EventBus host and its handler modules.",
        subcommands: [ModuleCommand.self]
    )
}
