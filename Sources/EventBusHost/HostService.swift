import Logging
import ServiceLifecycle
import UnixSignals

/// The host as a swift-service-lifecycle `Service`: start, reload on SIGHUP, and on graceful
/// shutdown (SIGTERM or SIGINT, which the `ServiceGroup` turns into one) shut down within the
/// config's budget and return, so the process exits 0.
public struct HostService: Service {
    private let host: BusHost
    private let logger: Logger

    public init(host: BusHost, logger: Logger) {
        self.host = host
        self.logger = logger
    }

    public func run() async throws {
        // Trap SIGHUP before anything can tell a supervisor we are up: until a handler is
        // installed, SIGHUP's default action would kill the process.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        do {
            try await host.start()
        } catch {
            logger.critical("cannot start: \(error)")
            throw error
        }
        logger.info("ready; SIGHUP reloads \(host.configPath), SIGTERM stops")
        for await _ in hangups.cancelOnGracefulShutdown() {
            logger.info("SIGHUP: reloading \(host.configPath)")
            await host.reload()
        }
        _ = await host.shutdown()
    }
}
