@testable import EventBusHost
import Foundation
import Testing

/// sd_notify: the environment as systemd sets it, and the real eventbusd reporting to a
/// notification socket the test binds.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ServiceNotifyTests {
    @Test func watchdogIntervalIsHalfOfWatchdogUsecAndOnlyForThisProcess() {
        let own = ServiceManagerEnvironment(["NOTIFY_SOCKET": "/run/n", "WATCHDOG_USEC": "30000000"], processID: 42)
        #expect(own.notifySocket == "/run/n")
        #expect(own.watchdogInterval == .seconds(15))
        let forUs = ServiceManagerEnvironment(["WATCHDOG_USEC": "200000", "WATCHDOG_PID": "42"], processID: 42)
        #expect(forUs.watchdogInterval == .milliseconds(100))
        // A child that inherited its parent's watchdog variables must not ping for it.
        let forParent = ServiceManagerEnvironment(["WATCHDOG_USEC": "200000", "WATCHDOG_PID": "41"], processID: 42)
        #expect(forParent.watchdogInterval == nil)
        #expect(ServiceManagerEnvironment(["WATCHDOG_USEC": "0"], processID: 42).watchdogInterval == nil)
        #expect(ServiceManagerEnvironment(["WATCHDOG_USEC": "soon"], processID: 42).watchdogInterval == nil)
    }

    @Test func abstractAndUnsupportedNotifySockets() {
        #expect(ServiceManagerEnvironment(["NOTIFY_SOCKET": "@/org/systemd/notify"], processID: 1).notifySocket == "@/org/systemd/notify")
        let vsock = ServiceManagerEnvironment(["NOTIFY_SOCKET": "vsock:2:1234"], processID: 1)
        #expect(vsock.notifySocket == nil)
        #expect(vsock.unsupportedNotifySocket == "vsock:2:1234")
        #expect(ServiceManagerEnvironment([:], processID: 1).notifySocket == nil)
    }

    /// A notifier pointed at an abstract-namespace socket (how systemd's own socket is often
    /// named) delivers there; a status refresh goes out only while ready, and only when it
    /// changed.
    @Test func notifierSpeaksToAnAbstractSocketAndRefreshesStatusOnlyWhenReadyAndChanged() async throws {
        let name = "eventbus-notify-test-\(UUID().uuidString)"
        let receiver = try AbstractDatagramReceiver(name: name)
        let (logger, _) = recordingLogger()
        let notifier = try #require(ServiceNotifier(
            environment: ServiceManagerEnvironment(["NOTIFY_SOCKET": "@" + name], processID: 1), logger: logger))
        notifier.status("before ready")      // not sent: not ready yet
        notifier.ready(status: "a")
        notifier.status("a")                 // not sent: unchanged
        notifier.status("b")
        notifier.reloading()
        notifier.status("c")                 // not sent: reloading
        notifier.ready(status: "d")
        notifier.stopping()
        notifier.status("e")                 // not sent: stopping
        #expect(await eventually { receiver.messages.count >= 5 })
        let kinds = receiver.messages.map(notifyAssignments).map { message in
            ["READY", "RELOADING", "STOPPING"].first { message[$0] == "1" } ?? "STATUS=" + (message["STATUS"] ?? "?")
        }
        #expect(kinds == ["READY", "STATUS=b", "RELOADING", "READY", "STOPPING"])
        let reloading = notifyAssignments(receiver.messages[2])
        #expect(UInt64(reloading["MONOTONIC_USEC"] ?? "") != nil, "\(reloading)")
    }

    private static let config = """
        sources:
          timers:
            - {name: fast, every: 50ms}
        """

    /// The real eventbusd on `config`, notifying a socket the test binds.
    private struct NotifiedDaemon {
        let directory: TemporaryDirectory
        let receiver: DatagramReceiver
        let daemon: SpawnedProcess

        init(_ config: String, environment extra: [String: String] = [:]) throws {
            directory = try TemporaryDirectory()
            let configPath = try directory.writeDaemonConfig(config)
            receiver = try DatagramReceiver(path: directory.path + "/notify.sock")
            daemon = try SpawnedProcess(
                [BuildProducts.eventbusd, "--config", configPath],
                environment: environment(with: extra.merging(["NOTIFY_SOCKET": receiver.path]) { $1 }),
                outputPath: directory.path + "/eventbusd.log")
        }
    }

    /// READY=1 after start, RELOADING=1 … READY=1 around SIGHUP, STOPPING=1 on SIGTERM — in
    /// that order — with the status line on each READY.
    @Test func daemonReportsReadyReloadingAndStoppingInOrder() async throws {
        let run = try NotifiedDaemon(Self.config)
        let receiver = run.receiver, daemon = run.daemon

        #expect(await eventually { receiver.messages.contains { notifyAssignments($0)["READY"] == "1" } }, "\(daemon.output)")
        daemon.signal(SIGHUP)
        #expect(await eventually { receiver.messages.filter { notifyAssignments($0)["READY"] == "1" }.count == 2 }, "\(daemon.output)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
        _ = await eventually { receiver.messages.contains { notifyAssignments($0)["STOPPING"] == "1" } }

        let messages = receiver.messages.map(notifyAssignments)
        let lifecycle = messages.compactMap { message in ["READY", "RELOADING", "STOPPING"].first { message[$0] == "1" } }
        #expect(lifecycle == ["READY", "RELOADING", "READY", "STOPPING"], "\(receiver.messages)")
        let readies = messages.filter { $0["READY"] == "1" }
        #expect(readies.allSatisfy { ($0["STATUS"] ?? "").hasPrefix("0 module(s) active, 0 refused, 1 timer(s), ") }, "\(readies)")
        let reloading = try #require(messages.first { $0["RELOADING"] == "1" })
        #expect(UInt64(reloading["MONOTONIC_USEC"] ?? "") != nil)
        // No watchdog was asked for.
        #expect(!messages.contains { $0["WATCHDOG"] != nil })
    }

    /// Before each module call and before the shutdown: EXTEND_TIMEOUT_USEC= with that step's
    /// time limit plus the margin, and a STATUS= naming the step — so a start-up with slow
    /// modules is not killed by TimeoutStartSec=, and `systemctl status` says what it waits for.
    @Test func daemonExtendsItsTimeoutBeforeEachModuleCallAndTheShutdown() async throws {
        let run = try NotifiedDaemon("""
            shutdown_timeout: 7s
            modules:
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
            """)
        let receiver = run.receiver, daemon = run.daemon
        #expect(await eventually { receiver.messages.contains { notifyAssignments($0)["READY"] == "1" } }, "\(daemon.output)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
        _ = await eventually { receiver.messages.contains { notifyAssignments($0)["STATUS"] == "Shutting down" && notifyAssignments($0)["EXTEND_TIMEOUT_USEC"] != nil } }

        let messages = receiver.messages.map(notifyAssignments)
        let steps = messages.compactMap { message -> String? in
            if message["READY"] == "1" { return "READY" }
            if message["STOPPING"] == "1" { return "STOPPING" }
            guard let extend = message["EXTEND_TIMEOUT_USEC"] else { return nil }
            return "\(message["STATUS"] ?? "?") +\(extend)"
        }
        // The module call limit is eventbusd's default, 30 s; the margin is 5 s.
        #expect(steps == ["Activating module counter +35000000", "READY", "STOPPING", "Shutting down +12000000"],
                "\(receiver.messages)")
    }

    /// WATCHDOG_USEC=200ms: keep-alives every 100 ms; the test waits for several (no timing
    /// assertion beyond a generous bound).
    @Test func daemonSendsWatchdogKeepAlives() async throws {
        let run = try NotifiedDaemon(Self.config, environment: ["WATCHDOG_USEC": "200000"])
        let receiver = run.receiver, daemon = run.daemon
        let keepAlives = { receiver.messages.filter { notifyAssignments($0)["WATCHDOG"] == "1" }.count }
        #expect(await eventually { keepAlives() >= 5 }, "\(receiver.messages)")
        #expect(receiver.messages.contains { notifyAssignments($0)["READY"] == "1" })
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    /// A refreshed STATUS= line reports the events posted since READY (the timer keeps posting).
    @Test func daemonRefreshesItsStatusLine() async throws {
        let run = try NotifiedDaemon(Self.config)
        let receiver = run.receiver, daemon = run.daemon
        let refreshes = {
            receiver.messages.map(notifyAssignments).filter { $0.count == 1 && $0["STATUS"] != nil }
        }
        #expect(await eventually { !refreshes().isEmpty }, "\(receiver.messages)")
        #expect(refreshes().allSatisfy { $0["STATUS"]!.hasPrefix("0 module(s) active, 0 refused, 1 timer(s), ") })
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }
}

/// A datagram socket in the abstract namespace (no file), as `$NOTIFY_SOCKET=@name` names one.
final class AbstractDatagramReceiver: @unchecked Sendable {
    private let fd: Int32
    private let received = Collected<[String]>([])

    init(name: String) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        self.fd = fd
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = [UInt8(0)] + Array(name.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
        let length = socklen_t(MemoryLayout<sockaddr_un>.offset(of: \.sun_path)! + bytes.count)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) }
        }
        guard bound == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }

    /// What has arrived (read without waiting).
    var messages: [String] {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            guard count > 0 else { break }
            received.update { $0.append(String(decoding: buffer[0..<count], as: UTF8.self)) }
        }
        return received.value
    }

    deinit { close(fd) }
}
