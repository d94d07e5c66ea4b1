import Foundation
import RuleActions
import SystemdBus
import SystemCalls

/// Runs rules' commands as transient systemd units (`StartTransientUnit`), so each is a unit of
/// its own: its own cgroup, limits and sandbox as unit properties, its output in the journal
/// under its name, `systemctl status` and `systemctl stop` like any service.
///
/// A transient unit runs outside eventbusd's own sandbox, as the rule's `user:` (``defaultUser``
/// when it names none; root only when it says `root`): rules are trusted like unit files
/// (docs/rules-privileges.md).
///
/// What a unit gets (docs/transient-units.md): `Type=exec` (the start succeeds once the program
/// was executed, so a missing program or user is a failed start, not an exit status);
/// `ExecStart=` the argv itself, never through a shell (nor through systemd's `$VARIABLE`
/// expansion); `User=`, `Group=`, `WorkingDirectory=` (`/` by default), `Environment=`; the
/// standard input (`StandardInputData=`, then EOF); standard output and error to the journal;
/// `RuntimeMaxSec=` from the timeout, `TimeoutStopSec=` from the stop grace;
/// `CollectMode=inactive-or-failed`, so a finished unit is gone at once and its name free; and
/// the rule's own unit properties (``check(_:)``).
///
/// Threads: each ``run(_:started:)`` has its own sd-bus connection on a thread of its own
/// (`eventbus.unit`, ``TransientUnitRun`` says why); `started` is called on it. The launcher
/// itself holds only values and may be used from any thread.
public final class TransientUnitLauncher: CommandLauncher {
    public let kind = "systemd"
    public let supportsUnitProperties = true
    /// Where each run connects: systemd's private socket (root) or the system bus.
    public let address: String
    /// Who runs a command whose rule names no `user:`: an unprivileged user, never root by default.
    public let defaultUser: String

    /// Where systemd is spoken to, and how.
    struct Endpoint: Sendable {
        var address: String
        /// A message bus (dbus-daemon: Hello, routing by name) rather than systemd's private socket.
        var busClient: Bool
    }

    private let endpoint: Endpoint

    private init(endpoint: Endpoint, defaultUser: String) {
        self.endpoint = endpoint
        address = endpoint.address
        self.defaultUser = defaultUser
    }

    /// A launcher when systemd can run units for this process, or why not: PID 1 is not systemd,
    /// no connection to it could be made, it did not answer, or it would refuse this user —
    /// naming the address tried.
    ///
    /// `address`: nil for the system manager — its private socket `/run/systemd/private` when
    /// this process is root (no dbus-daemon, no polkit in the path), else the system bus, where
    /// polkit decides: a non-root caller is asked about up front (``ManagerAccess``), and should
    /// polkit change its mind later, a refused start is the run's
    /// ``CommandOutcome/Termination/failedToStart(_:)`` with systemd's words ("Interactive
    /// authentication required"). Synchronous (one or two calls, at most 10 s each): call it
    /// off the cooperative threads when that matters.
    public static func connect(address: String? = nil, defaultUser: String = "nobody") -> Result<TransientUnitLauncher, TransientUnitError> {
        let endpoint: Endpoint
        if let address {
            endpoint = Endpoint(address: address, busClient: !address.hasSuffix("/systemd/private"))
        } else {
            guard System.isAccessible("/run/systemd/system") else {
                return .failure(TransientUnitError(.notBooted, "PID 1 is not systemd (no /run/systemd/system): no transient units"))
            }
            let privateSocket = "/run/systemd/private"
            if geteuid() == 0, System.isAccessible(privateSocket) {
                endpoint = Endpoint(address: "unix:path=\(privateSocket)", busClient: false)
            } else {
                let system = ProcessInfo.processInfo.environment["DBUS_SYSTEM_BUS_ADDRESS"] ?? "unix:path=/run/dbus/system_bus_socket"
                endpoint = Endpoint(address: system, busClient: true)
            }
        }
        return ManagerAccess.check(endpoint).map { TransientUnitLauncher(endpoint: endpoint, defaultUser: defaultUser) }
    }

    /// One problem per property that cannot be a unit property: not in the table, set by the
    /// rule's own keys, or a value not of its type — each naming the property
    /// (`MemoryMax: 'banana' is not a size (…)`). Empty when every one converts. For the rule
    /// loader, so a rule is refused when it is loaded rather than at its first event.
    public static func check(_ properties: [UnitProperty]) -> [String] {
        properties.compactMap { property in
            if case .failure(let problem) = UnitPropertyTable.convert(property) { problem.message } else { nil }
        }
    }

    public func run(_ spec: CommandSpec, started: @escaping @Sendable (CommandStart) -> Void) async -> CommandOutcome {
        let properties: [(name: String, value: SDBusVariant)]
        switch Self.unitProperties(for: spec, defaultUser: defaultUser) {
        case .success(let list): properties = list
        case .failure(let problems):
            return CommandOutcome(termination: .failedToStart(problems.message), duration: .zero)
        }
        let run = TransientUnitRun(spec: spec, properties: properties, endpoint: endpoint, started: started)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                run.start { continuation.resume(returning: $0) }
            }
        } onCancel: {
            run.cancel()
        }
    }

    /// Every property of the unit for `spec`, in the order sent: the launcher's, then the rule's.
    static func unitProperties(for spec: CommandSpec, defaultUser: String) -> Result<[(name: String, value: SDBusVariant)], UnitPropertiesRefused> {
        guard let program = spec.argv.first, program.hasPrefix("/") else {
            return .failure(UnitPropertiesRefused([UnitPropertyProblem(property: "ExecStart",
                message: "the command must start with an absolute path, not \(spec.argv.first.map { "'\($0)'" } ?? "nothing")")]))
        }
        var properties: [(name: String, value: SDBusVariant)] = [
            ("Description", .string("EventBus rule command \(spec.unitName): \(program)")),
            ("Type", .string("exec")),
            // systemd expands `$NAME`, `${NAME}` and `$$` in every argument when it executes
            // the command, D-Bus or not: each `$` doubled reaches the program as one, exactly as
            // the rule wrote it.
            ("ExecStart", .commands([SDBusExecCommand(path: program, arguments: spec.argv.map { $0.replacingOccurrences(of: "$", with: "$$") })])),
            ("WorkingDirectory", .string(spec.workingDirectory ?? "/")),
            ("StandardOutput", .string("journal")),
            ("StandardError", .string("journal")),
            ("TimeoutStopUSec", .uint64(Self.microseconds(spec.stopGrace))),
            ("CollectMode", .string("inactive-or-failed")),
        ]
        // DynamicUser=yes without `user:`: no User=, so systemd makes up a user of the unit's
        // own (with User=nobody it would run as the real nobody instead).
        let dynamicUser = spec.unitProperties.contains { $0.name == "DynamicUser" && UnitPropertyTable.boolean($0.value) == true }
        if let user = spec.user ?? (dynamicUser ? nil : defaultUser) { properties.append(("User", .string(user))) }
        if let group = spec.group { properties.append(("Group", .string(group))) }
        if !spec.environment.isEmpty {
            properties.append(("Environment", .strings(spec.environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" })))
        }
        if !spec.standardInput.isEmpty {
            properties.append(("StandardInput", .string("data")))
            properties.append(("StandardInputData", .bytes(spec.standardInput)))
        }
        if let timeout = spec.timeout { properties.append(("RuntimeMaxUSec", .uint64(Self.microseconds(timeout)))) }
        var problems: [UnitPropertyProblem] = []
        for property in spec.unitProperties {
            switch UnitPropertyTable.convert(property) {
            case .success(let converted): properties.append(converted)
            case .failure(let problem): problems.append(problem)
            }
        }
        return problems.isEmpty ? .success(properties) : .failure(UnitPropertiesRefused(problems))
    }

    /// At least 1 µs: systemd reads 0 as "no limit".
    static func microseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        guard seconds >= 0 else { return 1 }
        return max(1, UInt64(seconds) * 1_000_000 + UInt64(attoseconds / 1_000_000_000_000))
    }
}

/// The problems of a spec whose unit properties cannot all be sent.
struct UnitPropertiesRefused: Error {
    var problems: [UnitPropertyProblem]
    init(_ problems: [UnitPropertyProblem]) { self.problems = problems }
    var message: String { problems.map(\.message).joined(separator: "; ") }
}
