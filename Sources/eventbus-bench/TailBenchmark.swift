import ControlProtocol
import EventBusHost
import EventBusKit
import Foundation
import Logging

// Tail benchmark: events per second delivered through the control socket to a real
// `eventbus tail … > /dev/null` (a child process), timed from the first post to the tail's exit
// after `--count N`. The host runs in this process (a BusHost with its control socket), so the
// tail's rate is measured without a second process competing to post; the last row posts over
// the socket instead, as `eventbus post` and scripts do, to show the ingest path too.
//
// Each event is a realistic small one: name, source, three fields (int, string, double).
// Posting is paced so the tail's buffer never overflows: the benchmark reads the tail's
// delivered count from the host's `stats` and stays within `window` events of it, and the
// client's buffer holds twice that (in events and in bytes). A run that drops anything is
// stopped and reported as such (it would be a bug, not a rate).

/// One measured run.
private struct TailRun {
    var label: String
    var events: Int
    var seconds: Double
    var dropped: Int64
    /// CPU time of this process (the host, and the in-process poster) and of the CLI child, per
    /// event: what the run costs, which a loaded machine stretches less than the wall time.
    var cpu: (host: Double, cli: Double)
}

/// CPU seconds (user + system) of this process and of its waited-for children so far.
private func cpuSeconds() -> (host: Double, cli: Double) {
    func seconds(_ who: __rusage_who) -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(who.rawValue), &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }
    return (seconds(RUSAGE_SELF), seconds(RUSAGE_CHILDREN))
}

func tailBenchmark(events: Int) async {
    let directory = NSTemporaryDirectory() + "eventbus-bench-tail-\(getpid())"
    try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false,
                                             attributes: [.posixPermissions: 0o700])
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let socket = directory + "/control.sock"
    let config = directory + "/eventbus.yaml"
    let window = 100_000
    precondition(FileManager.default.createFile(atPath: config, contents: Data("""
        control:
          socket: \(socket)
          client_buffer: \(2 * window)
          client_buffer_bytes: 512MiB
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
    print("tail benchmark: \(events) events per run, \(ProcessInfo.processInfo.activeProcessorCount) cores, \(cli)")

    var runs: [TailRun] = []
    var first = 1
    for (label, json, viaSocket) in [("tail --json, posted in-process", true, false),
                                     ("tail --json, posted in-process (again)", true, false),
                                     ("tail (human format), posted in-process", false, false),
                                     ("tail --json, posted over the socket", true, true)] {
        guard let run = tailRun(label: label, cli: cli, socket: socket, host: host, json: json, viaSocket: viaSocket,
                                events: events, firstValue: first, window: window) else { exit(1) }
        runs.append(run)
        first += events
    }
    let lineBytes = lastEventLine(socket)?.count ?? 0
    guard let stdinRun = postStdinRun(cli: cli, socket: socket, directory: directory, events: events) else { exit(1) }
    runs.append(stdinRun)
    _ = await host.shutdown()

    print("")
    print("| run | events | seconds | events/s | MB/s of JSON lines | dropped | CPU µs/event: host, CLI |")
    print("|---|---|---|---|---|---|---|")
    for run in runs {
        let rate = Double(run.events) / run.seconds
        print("| \(run.label) | \(run.events) | \(String(format: "%.3f", run.seconds)) | \(String(format: "%.0f", rate)) | \(String(format: "%.1f", rate * Double(lineBytes + 1) / 1e6)) | \(run.dropped) | \(String(format: "%.2f, %.2f", run.cpu.host * 1e6 / Double(run.events), run.cpu.cli * 1e6 / Double(run.events))) |")
    }
    print("(an event line is \(lineBytes + 1) bytes)")
}

/// `eventbus post --stdin < FILE` with `events` JSON lines, timed from start to exit; no tail.
private func postStdinRun(cli: String, socket: String, directory: String, events: Int) -> TailRun? {
    let input = directory + "/events.jsonl"
    var text = ""
    text.reserveCapacity(events * 70)
    for index in 0..<events {
        text += #"{"name":"bench.stdin","fields":{"n":\#(index),"host":"web-1","latency_ms":12.5}}"# + "\n"
    }
    guard FileManager.default.createFile(atPath: input, contents: Data(text.utf8)),
          let handle = FileHandle(forReadingAtPath: input) else { return nil }
    let poster = Process()
    poster.executableURL = URL(fileURLWithPath: cli)
    poster.arguments = ["post", "--stdin", "--socket", socket]
    poster.standardInput = handle
    let start = ContinuousClock.now
    let cpuBefore = cpuSeconds()
    do { try poster.run() } catch {
        print("cannot run \(cli): \(error)")
        return nil
    }
    poster.waitUntilExit()
    let elapsed = ContinuousClock.now - start
    guard poster.terminationStatus == 0 else {
        print("post --stdin exited with status \(poster.terminationStatus)")
        return nil
    }
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    let cpuAfter = cpuSeconds()
    return TailRun(label: "eventbus post --stdin (JSON lines, no tail)", events: events, seconds: seconds, dropped: 0,
                   cpu: (cpuAfter.host - cpuBefore.host, cpuAfter.cli - cpuBefore.cli))
}

/// The protocol line of the newest event, as a tail receives it.
private func lastEventLine(_ socket: String) -> [UInt8]? {
    guard let connection = try? ControlConnection(path: socket) else { return nil }
    _ = try? connection.readLine()  // hello
    try? connection.send(["op": "subscribe", "last": .int(1), "count": .int(1)])
    _ = try? connection.readLine()  // subscribed
    return try? connection.readLine()
}

/// One tail process, `events` events, timed from the first post to its exit.
private func tailRun(label: String, cli: String, socket: String, host: BusHost, json: Bool, viaSocket: Bool,
                     events: Int, firstValue: Int, window: Int) -> TailRun? {
    let tail = Process()
    tail.executableURL = URL(fileURLWithPath: cli)
    tail.arguments = ["tail", "--socket", socket, "--count", "\(events)", "bench.>"] + (json ? ["--json"] : [])
    tail.standardOutput = FileHandle.nullDevice
    tail.environment = ["NO_COLOR": "1"]
    do { try tail.run() } catch {
        print("cannot run \(cli): \(error)")
        return nil
    }
    // Wait for its subscription, and for the previous run's tail to be gone from the stats.
    while stats(socket)?["tailing"]?.arrayValue?.count != 1 { usleep(1_000) }

    // One connection for the pacing's `stats` requests (not one per look), so the benchmark
    // adds little to the loop it measures.
    guard let statistics = try? ControlConnection(path: socket) else { return nil }
    _ = try? statistics.readLine()  // hello
    func tailing(_ name: String) -> Int64? {
        try? statistics.send(["op": "stats"])
        return (try? statistics.readJSON())??["tailing"]?.arrayValue?.first?[name]?.intValue
    }
    let start = ContinuousClock.now
    let cpuBefore = cpuSeconds()
    let poster: ControlConnection? = viaSocket ? try? ControlConnection(path: socket) : nil
    if viaSocket { _ = try? poster?.readLine() }  // hello
    var posted = 0
    while posted < events {
        let delivered = Int(tailing("delivered") ?? 0)
        let chunk = min(events - posted, max(0, delivered + window - posted), 20_000)
        if chunk == 0 {
            usleep(200)
            continue
        }
        if let poster {
            // Windows of requests whose answers are read before the next: the host stops
            // reading a client whose answers it cannot write, so unread answers would stall both.
            for windowStart in stride(from: posted, to: posted + chunk, by: 1_000) {
                let windowEnd = min(windowStart + 1_000, posted + chunk)
                var bytes: [UInt8] = []
                for index in windowStart..<windowEnd {
                    bytes += JSONWriter.line(["op": "post", "name": "bench.tail", "fields": [
                        "n": .int(Int64(firstValue + index)), "host": "web-1", "latency_ms": .double(12.5)]])
                }
                try? poster.send(bytes)
                for _ in windowStart..<windowEnd { _ = try? poster.readLine() }
            }
        } else {
            for index in posted..<(posted + chunk) {
                host.bus.post(Event(name: "bench.tail", source: "bench", fields: [
                    "n": .int(Int64(firstValue + index)), "host": "web-1", "latency_ms": .double(12.5)]))
            }
        }
        posted += chunk
    }
    // A tail that lost events never reaches its `--count`: stopped, and the run reported with
    // its drops rather than waited for.
    var dropped = tailing("dropped") ?? 0
    while tail.isRunning {
        dropped = tailing("dropped") ?? dropped
        if dropped > 0 {
            tail.terminate()
            break
        }
        usleep(20_000)
    }
    tail.waitUntilExit()
    let elapsed = ContinuousClock.now - start
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    guard tail.terminationStatus == 0 || dropped > 0 else {
        print("\(label): the tail exited with status \(tail.terminationStatus)")
        return nil
    }
    let cpuAfter = cpuSeconds()
    return TailRun(label: label, events: events, seconds: seconds, dropped: dropped,
                   cpu: (cpuAfter.host - cpuBefore.host, cpuAfter.cli - cpuBefore.cli))
}

private func stats(_ socket: String) -> JSON? {
    guard let connection = try? ControlConnection(path: socket) else { return nil }
    _ = try? connection.readLine()
    try? connection.send(["op": "stats"])
    return try? connection.readJSON()
}
