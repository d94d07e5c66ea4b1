@_spi(EventBusHost) import EventBusKit
import Logging

/// What the service manager (systemd) told this process through its environment about
/// readiness notifications and the watchdog.
public struct ServiceManagerEnvironment: Sendable, Equatable {
    /// `$NOTIFY_SOCKET`: a path, or `@name` in the abstract namespace. Nil when not run by a
    /// service manager that wants notifications (or one that passed an address kind this host
    /// does not speak, such as `vsock:`; ``unsupportedNotifySocket`` says which).
    public var notifySocket: String?
    /// A `$NOTIFY_SOCKET` that is neither a path nor an abstract name.
    public var unsupportedNotifySocket: String?
    /// How often to send `WATCHDOG=1`: half of `$WATCHDOG_USEC`, as sd_watchdog_enabled(3)
    /// advises, so one late keep-alive is not yet a missed deadline. Nil when no watchdog is set
    /// or it is meant for another process (`$WATCHDOG_PID` names a different pid).
    public var watchdogInterval: Duration?

    public static let variables = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"]

    /// Interprets the variables as sd_notify(3) and sd_watchdog_enabled(3) do.
    public init(_ environment: [String: String], processID: Int32) {
        if let socket = environment["NOTIFY_SOCKET"], !socket.isEmpty {
            if socket.hasPrefix("/") || socket.hasPrefix("@") {
                notifySocket = socket
            } else {
                unsupportedNotifySocket = socket
            }
        }
        let pidMatches = environment["WATCHDOG_PID"].map { Int32($0) == processID } ?? true
        if pidMatches, let text = environment["WATCHDOG_USEC"], let microseconds = UInt64(text), microseconds > 0 {
            watchdogInterval = .microseconds(Int64(clamping: microseconds / 2))
        }
    }

    /// Reads the variables of this process and removes them from its environment, so a program
    /// a module starts does not report to systemd as if it were eventbusd (what
    /// sd_notify(3)'s `unset_environment` does). Call at start, before other threads run.
    public static func take() -> ServiceManagerEnvironment {
        var values: [String: String] = [:]
        for name in variables {
            values[name] = System.environment(name)
            System.unsetEnvironment(name)
        }
        return ServiceManagerEnvironment(values, processID: System.processID)
    }
}

/// Tells the service manager how the host is doing: sd_notify(3)'s protocol, spoken directly —
/// one datagram of `NAME=value` lines to `$NOTIFY_SOCKET` per notification.
///
/// Why not libsystemd's `sd_notify` (the host links libsystemd for its sources): the protocol is
/// one `sendmsg`, and speaking it here lets tests point it at their own socket and bounds how
/// long a send may wait (a second).
///
/// ## Threads
/// Any thread. Each notification is one datagram, sent under a lock so that a status refresh
/// can never land between `RELOADING=1` and the `READY=1` that ends the reload.
public final class ServiceNotifier: Sendable {
    public let socketPath: String
    /// See ``ServiceManagerEnvironment/watchdogInterval``.
    public let watchdogInterval: Duration?
    private let address: System.UnixAddress
    private let fd: Int32
    private let logger: Logger

    private struct State {
        /// Between `READY=1` and the next `RELOADING=1` or `STOPPING=1`: when plain status
        /// refreshes go out.
        var isReady = false
        var lastStatus: String?
        var sendFailureLogged = false
    }

    private let state = Locked(State())

    /// Nil when the environment names no notification socket (eventbusd was not started by
    /// systemd with `Type=notify`, or the socket cannot be used; that is logged).
    public init?(environment: ServiceManagerEnvironment, logger: Logger) {
        if let unsupported = environment.unsupportedNotifySocket {
            logger.warning("NOTIFY_SOCKET=\(unsupported) is not a Unix socket path; not sending readiness notifications")
        }
        guard let path = environment.notifySocket else { return nil }
        guard let address = System.UnixAddress(path) else {
            logger.warning("NOTIFY_SOCKET=\(path) is too long for a Unix socket address; not sending readiness notifications")
            return nil
        }
        do {
            fd = try System.datagramSocket(sendTimeout: .seconds(1))
        } catch {
            logger.warning("cannot create a socket for NOTIFY_SOCKET: \(error)")
            return nil
        }
        self.address = address
        self.socketPath = path
        self.watchdogInterval = environment.watchdogInterval
        self.logger = logger
    }

    deinit { System.close(fd) }

    /// `READY=1` with the current status: start-up, or a reload, is complete.
    public func ready(status: String) {
        state.withLock { state in
            state.isReady = true
            state.lastStatus = status
            send(["READY=1", "STATUS=" + status], &state)
        }
    }

    /// `RELOADING=1` with `MONOTONIC_USEC=`: a reload begins. systemd 253 and later
    /// (`Type=notify-reload`) match the timestamp against the time it sent SIGHUP; older ones
    /// ignore it. ``ready(status:)`` ends the reload.
    public func reloading() {
        state.withLock { state in
            state.isReady = false
            send(["RELOADING=1", "MONOTONIC_USEC=\(System.monotonicMicroseconds)", "STATUS=Reloading the config"], &state)
        }
    }

    /// `STOPPING=1`: a graceful shutdown begins.
    public func stopping() {
        state.withLock { state in
            state.isReady = false
            send(["STOPPING=1", "STATUS=Shutting down"], &state)
        }
    }

    /// `STATUS=` alone: shown by `systemctl status`. Sent only while ready (so it cannot
    /// contradict a reload or shutdown in progress) and only when it changed.
    public func status(_ line: String) {
        state.withLock { state in
            guard state.isReady, state.lastStatus != line else { return }
            state.lastStatus = line
            send(["STATUS=" + line], &state)
        }
    }

    /// `STATUS=` before readiness, e.g. why start-up failed.
    public func failed(_ reason: String) {
        state.withLock { state in
            state.isReady = false
            send(["STATUS=" + reason], &state)
        }
    }

    /// `EXTEND_TIMEOUT_USEC=` and `STATUS=` before `step` runs: systemd (≥ 236) then allows the
    /// start-up, reload or shutdown in progress at least the step's time limit (plus a margin
    /// for what surrounds it, such as loading the module's library) beyond its own timeout.
    public func extendTimeout(for step: HostProgress) {
        let microseconds = (step.timeLimit + Self.extensionMargin).clampedNanoseconds / 1000
        state.withLock { state in
            state.lastStatus = step.description
            send(["EXTEND_TIMEOUT_USEC=\(microseconds)", "STATUS=" + step.description], &state)
        }
    }

    static let extensionMargin = Duration.seconds(5)

    /// `WATCHDOG=1`: the keep-alive that `WatchdogSec=` expects.
    public func watchdogKeepAlive() {
        state.withLock { send(["WATCHDOG=1"], &$0) }
    }

    /// Sends one notification. A status line can never hold a newline (it would start a new
    /// assignment), so newlines become spaces. A failure is logged once: systemd gone means
    /// the host is being torn down anyway, and a log line per keep-alive would flood.
    private func send(_ assignments: [String], _ state: inout State) {
        let text = assignments.map { $0.replacing("\n", with: " ") }.joined(separator: "\n")
        let outcome = Array(text.utf8).withUnsafeBytes {
            System.sendDatagram($0, to: address, on: fd, wait: true)
        }
        guard outcome != .sent, !state.sendFailureLogged else { return }
        state.sendFailureLogged = true
        logger.warning("notifying the service manager at \(socketPath) failed (\(outcome)); further failures are not logged")
    }
}
