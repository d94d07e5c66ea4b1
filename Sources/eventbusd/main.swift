import ArgumentParser
import EventBusHost
import Logging
import ServiceLifecycle

/// eventbusd: the EventBus host daemon.
struct EventBusDaemon: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "eventbusd",
        abstract: "Runs the event bus with the timers and handler modules of its config file.",
        discussion: "SIGHUP reloads the config; SIGTERM or SIGINT shuts down gracefully within shutdown_timeout.")

    @Option(name: .long, help: "The config file.")
    var config: String = HostConfig.defaultPath

    @Flag(name: .long, help: "Check the config and that every enabled module loads and passes the ABI check, print a summary, and exit (0: ok, 1: problems) without starting.")
    var checkConfig = false

    @Option(name: .long, help: "Lowest level logged: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    func runDaemon() async throws {
        if checkConfig {
            let report = ConfigCheck.run(configPath: config)
            for line in report.lines { print(line) }
            throw report.isOK ? ExitCode.success : ExitCode.failure
        }
        let level = logLevel
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "eventbusd")
        let host = BusHost(configPath: config, logger: logger)
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: HostService(host: host, logger: logger))],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: logger))
        do {
            try await group.run()
        } catch {
            // HostService has logged why it could not start.
            throw ExitCode.failure
        }
    }
}

extension Logger.Level: @retroactive ExpressibleByArgument {}

// Parsed here and run with an async method of our own: in main.swift, an AsyncParsableCommand's
// `main()` resolves to the synchronous ParsableCommand entry, which refuses async commands.
let command = EventBusDaemon.parseOrExit()
do {
    try await command.runDaemon()
} catch {
    EventBusDaemon.exit(withError: error)
}
