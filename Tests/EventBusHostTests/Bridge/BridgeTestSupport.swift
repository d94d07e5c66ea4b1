import ControlProtocol
import Foundation
import TestSupport

/// A real eventbusd bridged through NATS, with its own config, control socket and state folder.
final class BridgedHost: @unchecked Sendable {
    /// `control` keys for a host whose whole life a test reads: a replay ring that holds it (a
    /// tail attached after a start sees what came before), and client buffers as large (the
    /// test's debug-build readers fall behind a new life's catch-up; the host would drop for
    /// them, announced, and the test would miss events the bridge delivered).
    static let wholeLifeControl = "replay_events: 100000, replay_bytes: 256MiB, client_buffer: 100000, client_buffer_bytes: 256MiB"

    let name: String
    let socket: String
    let configPath: String
    private let directory: TemporaryDirectory
    private let wrapper: [String]
    private(set) var daemon: DaemonProcessTests.Daemon?

    /// `bridge` is the body of `bridge.nats` (indented lines after `servers` and `host`). With a
    /// `wrapper` (`ip netns exec NAME`) the daemon runs through it and reaches the server at `url`.
    /// `control`: more keys of the `control` section (`replay_events: 1000`).
    init(_ name: String, server: NATSServer, url: String? = nil, wrapper: [String] = [], in directory: TemporaryDirectory,
         bridge: String, control: String? = nil) throws {
        self.name = name
        self.directory = directory
        self.wrapper = wrapper
        socket = directory.at("\(name).sock")
        let yaml = """
            shutdown_timeout: 5s
            state_directory: \(directory.path)/state-\(name)
            control: {socket: \(socket)\(control.map { ", " + $0 } ?? "")}
            bridge:
              nats:
                servers: [\(url ?? server.url)]
                host: \(name)
            \(bridge.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n"))
            """
        configPath = try directory.write("\(name).yaml", yaml)
    }

    /// Starts eventbusd and waits until it is ready and its bridge is connected.
    func start() async throws {
        let daemon = try DaemonProcessTests.Daemon(arguments: ["--config", configPath], wrapper: wrapper, in: directory)
        self.daemon = daemon
        guard await daemon.waitFor("ready; SIGHUP reloads") else { throw NotStarted(description: "\(name) never said ready: \(health)") }
        guard await eventually({ bridgeStatus?["state"]?.stringValue == "connected" }) else {
            throw NotStarted(description: "\(name)'s bridge never connected: \(health)\nits output ends:\n\(daemon.output.suffix(4000))")
        }
    }

    /// Why ``start()`` gave up: the host's state and the end of its output.
    struct NotStarted: Error, CustomStringConvertible {
        var description: String
    }

    func kill(_ signal: Int32 = SIGKILL) async {
        guard let daemon else { return }
        daemon.signal(signal)
        _ = await daemon.exitStatus()
        self.daemon = nil
    }

    var bridgeStatus: JSON? { (try? ask(socket, ["op": "status"]))?["bridge"] }

    /// Whether the daemon still runs, and if not how it ended with the end of its output: what a
    /// failure's message needs when a host stopped answering.
    var health: String {
        guard let daemon else { return "\(name): not started" }
        if daemon.process.isRunning {
            return "\(name): running (pid \(daemon.process.processIdentifier)); bridge status: \(bridgeStatus.map { String(describing: $0) } ?? "no answer")"
        }
        let how = daemon.process.terminationReason == .uncaughtSignal ? "killed by signal" : "exited with"
        return "\(name): \(how) \(daemon.process.terminationStatus); its output ends:\n\(daemon.output.suffix(4000))"
    }
    func count(_ key: String) -> Int64 { bridgeStatus?[key]?.intValue ?? -1 }
}

/// Everything a host's control socket streams for some patterns, from its first event (replay)
/// on, read by a thread of its own.
final class TailCollector: @unchecked Sendable {
    let lines = Collected<[JSON]>([])
    private let connection: ControlConnection

    /// `reading` false: subscribed, but nothing is read until ``startReading()`` — a client
    /// that has fallen behind.
    init(_ socket: String, _ patterns: [String], reading: Bool = true) throws {
        let (connection, _) = try rawConnection(socket)
        self.connection = connection
        try connection.send(["op": "subscribe", "patterns": .array(patterns.map(JSON.string)), "since_seq": .int(1)])
        guard try connection.readJSON()?["type"] == "subscribed" else { throw POSIXError(.EPROTO) }
        // Reads until the host closes the stream (the daemon ends with the test): a quiet spell
        // longer than rawConnection's minute — a loaded machine running the whole suite — must
        // not end the collection early.
        connection.setReceiveTimeout(seconds: 0)
        if reading { startReading() }
    }

    func startReading() {
        let lines = lines
        // The reading thread is the only user of the connection from here on.
        nonisolated(unsafe) let reader = connection
        Thread.detachNewThread {
            _ = try? reader.forEachLine { bytes in
                if let line = try? JSON.parse(bytes) { lines.update { $0.append(line) } }
                return true
            }
        }
    }

    var events: [JSON] { lines.value.filter { $0["type"] == "event" } }
    func named(_ prefix: String) -> [JSON] { events.filter { $0["name"]?.stringValue?.hasPrefix(prefix) == true } }

    /// (origin host or "local", n) of each event named `prefix…`, in arrival order.
    func keys(_ prefix: String) -> [String] {
        named(prefix).map { event in
            let fields = event["fields"]
            return "\(fields?["@origin.host"]?.stringValue ?? "local"):\(fields?["n"]?.intValue ?? -1)"
        }
    }
}

/// Posts `name` with fields n = from…through (and `pad`, that many bytes, if not 0) to a host,
/// over one connection.
/// Posts `name` events numbered 1, 2, 3… (``post(_:_:_:pad:)``) to a host's control socket from
/// a thread of its own, `batch` at a time with `pause` between, until ``stop()`` or until `limit`
/// are posted: load that goes on while a test kills servers and hosts. A post that fails ends it.
final class BackgroundPoster: @unchecked Sendable {
    // @unchecked: `count` and `stopping` are Collected; the rest is immutable.
    private let count = Collected<Int>(0)
    private let stopping = Collected<Bool>(false)
    private let done = DispatchSemaphore(value: 0)

    init(_ socket: String, _ name: String, batch: Int, every pause: Duration, limit: Int = .max) {
        let microseconds = useconds_t(pause.components.seconds * 1_000_000 + pause.components.attoseconds / 1_000_000_000_000)
        Thread.detachNewThread { [count, stopping, done] in
            defer { done.signal() }
            while !stopping.value, count.value < limit {
                let next = count.value + 1
                do { try post(socket, name, next...(next + batch - 1)) } catch { return }
                count.update { $0 += batch }
                usleep(microseconds)
            }
        }
    }

    /// How many it has posted so far.
    var posted: Int { count.value }

    /// Stops it and returns how many it posted in all.
    @discardableResult
    func stop() -> Int {
        stopping.update { $0 = true }
        done.wait()
        return count.value
    }
}

func post(_ socket: String, _ name: String, _ range: ClosedRange<Int>, pad: Int = 0) throws {
    let (connection, _) = try rawConnection(socket)
    var bytes: [UInt8] = []
    let padding = String(repeating: "x", count: pad)
    for n in range {
        var fields: [String: JSON] = ["n": .int(Int64(n))]
        if pad > 0 { fields["pad"] = .string(padding) }
        bytes += JSONWriter.line(["op": "post", "name": .string(name), "fields": .object(fields)])
    }
    try connection.send(bytes)
    for _ in range {
        guard try connection.readJSON()?["type"] == "posted" else { throw POSIXError(.EPROTO) }
    }
}
