import CSystemd
import EventBusKit
@testable import EventSources
import Foundation
import Glibc
@testable import SystemdBus
import Testing

// Helpers of the D-Bus source tests. Names carry a `DBus` prefix: the file, journal, device
// and unit tests share this test target.

/// A real `dbus-daemon` of a test's own (the session configuration: anyone may own any name
/// and send anything), listening at `unix:path=<folder>/bus`. Started by the test, stopped by
/// its pid; ``kill()`` and ``start()`` again make a bus that died and came back at the same address.
final class DBusPrivateDaemon: @unchecked Sendable {
    static let executable = "/usr/bin/dbus-daemon"
    let folder: TemporaryDirectory
    let socketPath: String
    var address: String { "unix:path=\(socketPath)" }
    private var process: Process?

    /// Rules one connection may add (`max_match_rules_per_connection`); nil: the session
    /// configuration's own limits.
    let matchRuleLimit: Int?

    /// A folder and an address; the daemon runs once `started` (default) or ``start()``.
    init(started: Bool = true, matchRuleLimit: Int? = nil) throws {
        folder = try TemporaryDirectory("eventbus-dbus")
        socketPath = folder.at("bus")
        self.matchRuleLimit = matchRuleLimit
        if started { try start() }
    }

    /// The session bus's policy (anyone owns and sends anything) with a rule limit.
    private func limitedConfiguration(_ limit: Int) throws -> String {
        try folder.write("bus.conf", """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>\(address)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
              <limit name="max_match_rules_per_connection">\(limit)</limit>
            </busconfig>
            """)
    }

    /// Starts the daemon and returns once it listens (it prints its address then).
    func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        let configuration = try matchRuleLimit.map { "--config-file=" + (try limitedConfiguration($0)) } ?? "--session"
        process.arguments = [configuration, "--nofork", "--address=\(address)", "--print-address"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        self.process = process
        // The address line comes once it listens; nothing (end of file) if it failed.
        let line = output.fileHandleForReading.readData(ofLength: 1)
        guard !line.isEmpty else { throw DBusTestFailure("dbus-daemon at \(address) did not start") }
    }

    var pid: Int32 { process?.processIdentifier ?? 0 }

    /// `running (pid N)`, or how it ended — for a test's message when its bus went away.
    var condition: String {
        guard let process else { return "not started" }
        if process.isRunning { return "running (pid \(process.processIdentifier))" }
        let how = process.terminationReason == .uncaughtSignal ? "killed by signal" : "exited with status"
        return "pid \(process.processIdentifier) \(how) \(process.terminationStatus)"
    }

    /// SIGKILL — the bus is gone at once, its clients' sockets closed — then waits for it. The
    /// socket file stays, as after a crash: a client reconnecting is refused until ``start()``.
    func kill() {
        guard let process, process.isRunning else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// SIGTERM, then waits for it to exit.
    func stop() {
        guard let process, process.isRunning else { return }
        Glibc.kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
    }

    deinit { kill() }
}

struct DBusTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A client of the test's bus that sends signals with sd-bus — any argument types, unix fds
/// included, as fast as the socket takes them — and may own well-known names (a fake logind).
/// Used from one task at a time.
final class DBusTestEmitter: @unchecked Sendable {
    let connection: SDBus

    /// Returns once the connection is authenticated and has its name: sd-bus closes one whose
    /// authentication has not finished within 90 s, and a connection nobody drives does not get
    /// on with it — an emitter first used after a long wait then failed with ENOTCONN.
    init(address: String, owning names: [String] = []) throws {
        connection = try SDBus.connect(address: address, busClient: true)
        guard connection.uniqueName != nil else { throw DBusTestFailure("no connection to the bus at \(address)") }
        for name in names { try own(name) }
    }

    /// Asks the bus for `name` and waits for the answer.
    func own(_ name: String) throws {
        let result = sd_bus_request_name(connection.bus, name, 0)
        guard result >= 0 else { throw DBusTestFailure("cannot own \(name): \(String(cString: strerror(-result)))") }
    }

    /// Gives `name` up and waits for the answer.
    func release(_ name: String) throws {
        let result = sd_bus_release_name(connection.bus, name)
        guard result >= 0 else { throw DBusTestFailure("cannot release \(name): \(String(cString: strerror(-result)))") }
    }

    /// This connection's unique name (`:1.7`).
    var uniqueName: String { connection.uniqueName ?? "?" }

    /// Sends a signal whose arguments `body` appends, and waits until it is written.
    func emit(path: String = "/eventbus/test", interface: String = "org.eventbus.Test", member: String,
              _ body: (SDBusMessageWriter) throws(SDBusError) -> Void = { _ in }) throws {
        try connection.emitSignal(path: path, interface: interface, member: member, body: body)
    }

    /// Appends a unix fd (sd-bus sends a duplicate of it).
    static func appendDescriptor(_ descriptor: Int32, to writer: SDBusMessageWriter) throws(SDBusError) {
        var value = descriptor
        try SDBusError.check(sd_bus_message_append_basic(writer.message, CChar(bitPattern: UInt8(ascii: "h")), &value), "append an fd")
    }
}

/// A bus with the D-Bus driver, and subscriptions recording what they deliver.
final class DBusRecorder: @unchecked Sendable {
    let bus = Bus()
    let driver: DBusDriver
    private var subscriptions: [AnyCancellable] = []
    private var collected: [Collected<[Event]>] = []

    init() {
        driver = DBusDriver.register(on: bus)
    }

    /// Subscribes to `watch`; returns the index of its recording.
    @discardableResult
    func follow(_ watch: DBusWatch) throws -> Int {
        let events = Collected<[Event]>([])
        subscriptions.append(try bus.dbus(watch).sink { event in events.update { $0.append(event) } })
        collected.append(events)
        return collected.count - 1
    }

    func events(_ index: Int = 0) -> [Event] { collected[index].value }
    func signals(_ index: Int = 0) -> [DBusSignal] { events(index).compactMap(\.dbusSignal) }

    func state(of watch: DBusWatch) -> String? { driver.sourceStates["\(DBusWatch.kind):\(watch)"] }

    /// Sends `probe` every 50 ms until recording `index` has an event for which `arrived`
    /// holds: the watch's rule is in place from then on (the bus adds it asynchronously).
    func waitUntilListening(_ index: Int = 0, arrived: @escaping (Event) -> Bool = { $0.dbusSignal?.member == "Probe" },
                            probe: () throws -> Void) async throws -> Bool {
        let start = ContinuousClock.now
        var probes = 0
        while ContinuousClock.now < start + patience {
            if events(index).contains(where: arrived) { return true }
            do { try probe() } catch {
                let states = driver.sourceStates.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }
                throw DBusTestFailure("\(error), after \(probes) probe(s) in \(ContinuousClock.now - start); the watches: \(states)")
            }
            probes += 1
            if await eventually(timeout: .milliseconds(50), { self.events(index).contains(where: arrived) }) { return true }
        }
        return false
    }

    func cancel() {
        subscriptions.forEach { $0.cancel() }
        subscriptions = []
    }

    deinit { cancel() }
}

extension SDBusMessageWriter {
    /// An `a{sv}`, as `PropertiesChanged` carries its changes.
    func changedProperties(_ properties: [(String, SDBusVariant)]) throws(SDBusError) {
        try container("a", "{sv}") { () throws(SDBusError) in
            for (name, value) in properties {
                try container("e", "sv") { () throws(SDBusError) in
                    try string(name)
                    try variant(value)
                }
            }
        }
    }

    func objectPath(_ path: String) throws(SDBusError) {
        try SDBusError.check(path.withCString { sd_bus_message_append_basic(message, CChar(bitPattern: UInt8(ascii: "o")), $0) }, "append a path")
    }
}
