import Logging
import ServiceLifecycle
import UnixSignals

/// The host as a swift-service-lifecycle `Service`: start, reload on SIGHUP, and on graceful
/// shutdown (SIGTERM or SIGINT, which the `ServiceGroup` turns into one) shut down within the
/// config's budget and return, so the process exits 0.
///
/// Under systemd (`Type=notify`, or `notify-reload` on systemd ≥ 253) each step is also told
/// to the service manager through `notifier`: `READY=1` once modules and sources are up,
/// `RELOADING=1` … `READY=1` around a reload, `STOPPING=1` before shutting down, and before
/// each step that may take a while (a module call, the shutdown) `EXTEND_TIMEOUT_USEC=` with
/// its time limit and a `STATUS=` naming it (see ``HostProgress``).
public struct HostService: Service {
    private let host: BusHost
    private let logger: Logger
    private let notifier: ServiceNotifier?

    public init(host: BusHost, logger: Logger, notifier: ServiceNotifier? = nil) {
        self.host = host
        self.logger = logger
        self.notifier = notifier
    }

    public func run() async throws {
        // Trap SIGHUP before anything can tell a supervisor we are up: until a handler is
        // installed, SIGHUP's default action would kill the process.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        let progress: @Sendable (HostProgress) -> Void = { [notifier] step in notifier?.extendTimeout(for: step) }
        // `eventbus reload` (systemd's ExecReload=) takes the same path as SIGHUP and learns
        // the outcome; reloads run one at a time on the host's control queue either way.
        host.acceptReloadRequests { [self] reply in
            Task { reply(await reload(progress: progress)) }
        }
        do {
            try await host.start(progress: progress)
        } catch {
            logger.critical("cannot start: \(error)")
            notifier?.failed("Cannot start: \(error)")
            throw error
        }
        logger.info("ready; SIGHUP reloads \(host.configPath) (as does `eventbus reload`), SIGTERM stops")
        notifier?.ready(status: host.statusLine)
        StartupPages.release(after: "start", logger: logger)
        for await _ in hangups.cancelOnGracefulShutdown() {
            logger.info("SIGHUP: reloading \(host.configPath)")
            await reload(progress: progress)
        }
        notifier?.stopping()
        _ = await host.shutdown(progress: progress)
    }

    @discardableResult
    private func reload(progress: @escaping @Sendable (HostProgress) -> Void) async -> ReloadOutcome {
        notifier?.reloading()
        let outcome = await host.reload(progress: progress)
        notifier?.ready(status: host.statusLine)
        StartupPages.release(after: "reload", logger: logger)
        return outcome
    }
}
