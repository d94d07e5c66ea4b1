import ControlProtocol
import EventBusHost
import EventFieldCoding
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import SystemCalls
@_spi(Benchmarks) import NATSBridge

// Wide-event benchmark: what one event costs against its field count (1 … 60 000, the most a
// 1 MiB post holds), on every path that walks its fields. A cost that grows faster than the
// fields is a way for one poster to stall everyone: the control loop serves every client.
//
// - Control socket: an in-process host (BusHost with its control socket) and a real
//   `eventbus tail` child, `--json` and the human format, reading K events of N fields posted
//   in-process (built before the clock starts). Host CPU (this process) and CLI CPU (the child)
//   per event, from getrusage: CPU, not wall time, so a loaded machine stretches it less.
// - NATS wire format: encode and decode of the same events, in a loop, CPU per event.
// The last column divides by the fields: flat means linear.

private func cpu() -> (host: Double, cli: Double) {
    func seconds(_ who: __rusage_who) -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(who.rawValue), &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }
    return (seconds(RUSAGE_SELF), seconds(RUSAGE_CHILDREN))
}

/// An event of `fields` fields: keys `k` + six digits reversed (so they arrive in no sorted
/// order), int and short string values in turn.
private func wideEvent(fields: Int, name: String) -> Event {
    var values: [String: FieldValue] = Dictionary(minimumCapacity: fields)
    for index in 0..<fields {
        let key = "k" + String(String(String(index + 1_000_000).dropFirst()).reversed())
        values[key] = index % 2 == 0 ? .int(Int64(index)) : .string("v\(index)")
    }
    return Event(name: name, source: "bench", fields: values)
}

func wideEventBenchmark(fieldCounts: [Int]) async {
    let directory = NSTemporaryDirectory() + "eventbus-bench-wide-\(getpid())"
    try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false,
                                             attributes: [.posixPermissions: 0o700])
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let socket = directory + "/control.sock"
    let config = directory + "/eventbus.yaml"
    precondition(FileManager.default.createFile(atPath: config, contents: Data("""
        control:
          socket: \(socket)
          client_buffer: 100000
          client_buffer_bytes: 268435456
        """.utf8)))
    var logger = Logger(label: "eventbus-bench")
    logger.logLevel = .warning
    let host = BusHost(configPath: config, logger: logger, control: .configured)
    do { try await host.start() } catch {
        print("cannot start the host: \(error)")
        exit(1)
    }
    let tool = ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
    let cli = (tool as NSString).deletingLastPathComponent + "/eventbus"
    print("wide-event benchmark: \(ProcessInfo.processInfo.activeProcessorCount) cores, \(cli)")
    print("")
    print("| fields | events | `tail --json`: host, CLI µs/event | human format: host, CLI µs/event | NATS encode, decode µs/event | host ns per field (JSON, human), NATS ns per field (encode, decode) |")
    print("|---|---|---|---|---|---|")
    for fields in fieldCounts {
        // About 2 million fields per run, at least 5 events.
        let events = max(5, min(20_000, 2_000_000 / fields))
        let event = wideEvent(fields: fields, name: "wide.bench")
        var control: [(host: Double, cli: Double)] = []
        for json in [true, false] {
            guard let cost = wideTailRun(cli: cli, socket: socket, host: host, event: event, events: events, json: json) else { exit(1) }
            control.append(cost)
        }
        let wire = wireRun(event: event, events: max(events, 20))
        func us(_ seconds: Double) -> String { String(format: "%.2f", seconds * 1e6) }
        func ns(_ seconds: Double) -> String { String(format: "%.0f", seconds * 1e9 / Double(fields)) }
        print("| \(fields) | \(events) | \(us(control[0].host)), \(us(control[0].cli)) | \(us(control[1].host)), \(us(control[1].cli)) | \(us(wire.encode)), \(us(wire.decode)) | \(ns(control[0].host)), \(ns(control[1].host)); \(ns(wire.encode)), \(ns(wire.decode)) |")
    }
    _ = await host.shutdown()
}

/// One `eventbus tail` reading `events` copies of `event`: CPU seconds per event of the host
/// and of the CLI.
private func wideTailRun(cli: String, socket: String, host: BusHost, event: Event, events: Int, json: Bool) -> (host: Double, cli: Double)? {
    let tail = Process()
    tail.executableURL = URL(fileURLWithPath: cli)
    tail.arguments = ["tail", "--socket", socket, "--count", "\(events)", "wide.>"] + (json ? ["--json"] : [])
    tail.standardOutput = FileHandle.nullDevice
    tail.environment = ["NO_COLOR": "1"]
    do { try tail.run() } catch {
        print("cannot run \(cli): \(error)")
        return nil
    }
    while tailingCount(socket) != 1 { System.sleep(for: .microseconds(1_000)) }
    let batch = [Event](repeating: event, count: events)
    let before = cpu()
    for event in batch { host.bus.post(event) }
    tail.waitUntilExit()
    let after = cpu()
    guard tail.terminationStatus == 0 else {
        print("the tail exited with status \(tail.terminationStatus)")
        return nil
    }
    return ((after.host - before.host) / Double(events), (after.cli - before.cli) / Double(events))
}

private func tailingCount(_ socket: String) -> Int? {
    guard let connection = try? ControlConnection(path: socket) else { return nil }
    _ = try? connection.readLine()
    try? connection.send(["op": "stats"])
    return (try? connection.readJSON())??["tailing"]?.arrayValue?.count
}

/// The bridge's payload encode and decode of `event`, `events` times each: CPU seconds per event.
private func wireRun(event: Event, events: Int) -> (encode: Double, decode: Double) {
    var buffer = FieldWriter()
    let start = cpu().host
    for _ in 0..<events { WireFormatBenchmark.encode(event, into: &buffer) }
    let encoded = cpu().host
    var decodedFields = 0
    for _ in 0..<events {
        decodedFields &+= buffer.withUnsafeBytes { WireFormatBenchmark.decodedFieldCount($0, name: event.name) }
    }
    let decoded = cpu().host
    precondition(decodedFields == events * (event.fields.count + 3), "the payload did not decode")
    return ((encoded - start) / Double(events), (decoded - encoded) / Double(events))
}
