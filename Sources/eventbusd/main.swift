import ArgumentParser
import ControlProtocol
import EventBusHost
import Foundation
import Logging
import ServiceLifecycle
import SystemCalls

/// eventbusd: the EventBus host daemon.
struct EventBusDaemon: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "eventbusd",
        abstract: "Runs the event bus with the timers and handler modules of its config file.",
        discussion: "SIGHUP reloads the config; SIGTERM or SIGINT shuts down gracefully within shutdown_timeout.",
        version: "eventbusd \(ControlProtocol.versionLine)")

    @Option(name: .long, help: "The config file.")
    var config: String = HostConfig.defaultPath

    @Flag(name: .long, help: "Check the config and that every enabled module loads (each in a check process of its own, so a module that crashes or hangs while loading is reported, not fatal) and passes the ABI check, print a summary, and exit (0: ok, 1: problems) without starting.")
    var checkConfig = false

    @Option(name: .long, help: ArgumentHelp(
        "Say which rules of the config (and its rules.d/) would fire for this event and what each would run, then exit without running anything (what `eventbus rules test` runs).",
        valueName: "NAME [FIELD=VALUE…]"))
    var testRules: String?

    @Option(name: .long, help: ArgumentHelp(
        "With --check-config: how long one module may take to load before its check process is killed and the module reported as hung (default: \(ConfigCheck.defaultLoadTimeout.components.seconds), as long as a starting host waits for a module).",
        valueName: "seconds"))
    var checkTimeout: Double?

    @Option(name: .long, help: ArgumentHelp(
        "The control socket to listen on. Wins over $\(ControlProtocol.socketEnvironmentVariable), which wins over the config's control.socket; a relative path is taken from the current folder. Ignored under socket activation (systemd's socket is used).",
        valueName: "path"))
    var socket: String?

    @Option(name: .long, help: "Lowest level logged: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .info

    /// `--socket`, else `$EVENTBUS_SOCKET` (so the CLI and a private host agree with one export),
    /// made absolute against the folder eventbusd was started in.
    private var controlSocketPath: String? {
        let named = socket ?? ProcessInfo.processInfo.environment[ControlProtocol.socketEnvironmentVariable].flatMap { $0.isEmpty ? nil : $0 }
        guard let named else { return nil }
        return named.hasPrefix("/") ? named : FileManager.default.currentDirectoryPath + "/" + named
    }

    func validate() throws {
        if let socket, socket.isEmpty { throw ValidationError("--socket must not be empty") }
        if let checkTimeout, !(checkTimeout > 0) { throw ValidationError("--check-timeout must be a number of seconds above 0") }
    }

    func runDaemon() async throws {
        if let testRules {
            let report = RuleDryRun.run(configPath: config, event: testRules)
            for line in report.lines { print(line) }
            throw ExitCode(report.exitCode)
        }
        if checkConfig {
            let report = ConfigCheck.run(configPath: config,
                                         loadTimeout: checkTimeout.map { .milliseconds(Int64($0 * 1000)) } ?? ConfigCheck.defaultLoadTimeout)
            for line in report.lines { print(line) }
            throw report.isOK ? ExitCode.success : ExitCode.failure
        }
        // A fatal signal ends the host even when it was sent (systemd's watchdog sends SIGABRT).
        FatalSignals.install()
        // What systemd passed in the environment, read (and removed) before any thread runs.
        let serviceManager = ServiceManagerEnvironment.take()
        let activation = SocketActivation.take()
        let journal = HostLogging.bootstrap(level: logLevel)
        // The last lines (the shutdown report) must reach journald before the process ends.
        defer { journal?.flush(timeout: .seconds(2)) }
        let logger = Logger(label: "eventbusd")
        // Every control client is a descriptor: take what the hard limit allows (systemd's and
        // most distributions' soft default of 1024 is for select(2), which eventbusd does not use).
        let files = System.raiseOpenFileLimit()
        if files.after.soft != files.before.soft {
            logger.info("open files limit raised from \(files.before.soft) to \(files.after.soft) (RLIMIT_NOFILE hard limit)")
        }
        let controlSocket = adoptControlSocket(from: activation, logger: logger)
        // The control server accepts on systemd's socket when there is one, else binds control.socket.
        let host = BusHost(configPath: config, logger: logger,
                           control: controlSocket.map { .inherited(fileDescriptor: $0.fileDescriptor, path: $0.path) } ?? .configured,
                           controlSocketPath: controlSocketPath)
        let notifier = ServiceNotifier(environment: serviceManager, logger: logger)
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = []
        // First, so the group stops it last: keep-alives go on while the host shuts down.
        if let notifier { services.append(.init(service: ServiceManagerService(notifier: notifier, host: host))) }
        services.append(.init(service: HostService(host: host, logger: logger, notifier: notifier)))
        let group = ServiceGroup(configuration: .init(
            services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            // HostService has logged why it could not start.
            throw ExitCode.failure
        }
    }

    /// The control socket systemd opened for eventbusd (`eventbusd.socket`), if it was
    /// socket-activated: the control server accepts on it instead of binding its own.
    private func adoptControlSocket(from activation: SocketActivation, logger: Logger) -> SocketActivation.InheritedSocket? {
        if let problem = activation.problem(takingListenerNamed: "control") {
            logger.warning("\(problem); not using it")
        }
        guard let socket = activation.takeListener(named: "control") else { return nil }
        logger.info("socket activation: adopted fd \(socket.fileDescriptor) listening on \(socket.path ?? "an unnamed socket") as the control socket")
        return socket
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
