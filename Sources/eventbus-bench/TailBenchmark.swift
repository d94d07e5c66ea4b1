import ControlProtocol
import EventBusHost
import EventBusKit
import Foundation
import Logging
import SystemCalls

// Tail benchmark: events per second delivered through the control socket to a real
// `eventbus tail … > /dev/null` (a child process), timed from the first post to the tail's exit
// after `--count N`. The host runs in this process (a BusHost with its control socket), so the
// tail's rate is measured without a second process competing to post; the last row posts over
// the socket instead, as `eventbus post` and scripts do, to show the ingest path too.
//
// Each event is a realistic small one: name, source, three fields (int, string, double).
// The in-process poster stands for a module or source posting into the host: building the event
// (its fields dictionary, its two clock reads) and the pacing's `stats` round trips are the
// poster's work, timed on its thread and reported apart ("bench"); what the host does — the post,
// the fan-out on the posting thread, the control loop's encoding and writing, freeing the events
// the replay ring lets go — is the process's CPU time less that, split by thread.
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
    /// CPU seconds of the host (this process less the benchmark's own work), of the benchmark's
    /// poster (building events, pacing; over the socket: the whole client) and of the CLI child:
    /// what the run costs, which a loaded machine stretches less than the wall time.
    var cpu: (host: Double, bench: Double, cli: Double)
    /// The host's CPU seconds by thread: the posting thread (the post and the fan-out run on the
    /// poster's thread when the bus is idle), the control loop, and the rest.
    var hostThreads: (posting: Double, control: Double, other: Double)
    /// The pacing's `stats` requests (each one is work for the control loop).
    var pacingRequests: Int
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
    print("| run | events | seconds | events/s | MB/s of JSON lines | dropped | CPU µs/event: host (posting thread, control loop, other), bench's poster, CLI | pacing requests |")
    print("|---|---|---|---|---|---|---|---|")
    for run in runs {
        let rate = Double(run.events) / run.seconds
        func perEvent(_ seconds: Double) -> String { String(format: "%.2f", seconds * 1e6 / Double(run.events)) }
        let threads = run.hostThreads
        print("| \(run.label) | \(run.events) | \(String(format: "%.3f", run.seconds)) | \(String(format: "%.0f", rate)) | \(String(format: "%.1f", rate * Double(lineBytes + 1) / 1e6)) | \(run.dropped) | \(perEvent(run.cpu.host)) (\(perEvent(threads.posting)), \(perEvent(threads.control)), \(perEvent(threads.other))), \(perEvent(run.cpu.bench)), \(perEvent(run.cpu.cli)) | \(run.pacingRequests) |")
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
    let threadsBefore = ThreadTimes.now()
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
    let host = cpuAfter.host - cpuBefore.host
    let control = ThreadTimes.now().since(threadsBefore).values.filter { $0.name == "eventbus.ctrl" }.reduce(0) { $0 + $1.seconds }
    return TailRun(label: "eventbus post --stdin (JSON lines, no tail)", events: events, seconds: seconds, dropped: 0,
                   cpu: (host, 0, cpuAfter.cli - cpuBefore.cli), hostThreads: (0, control, host - control), pacingRequests: 0)
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
    while stats(socket)?["tailing"]?.arrayValue?.count != 1 { System.sleep(for: .microseconds(1_000)) }

    // One connection for the pacing's `stats` requests (not one per look), so the benchmark
    // adds little to the loop it measures.
    guard let statistics = try? ControlConnection(path: socket) else { return nil }
    _ = try? statistics.readLine()  // hello
    var pacingRequests = 0
    func tailing(_ name: String) -> Int64? {
        pacingRequests += 1
        try? statistics.send(["op": "stats"])
        return (try? statistics.readJSON())??["tailing"]?.arrayValue?.first?[name]?.intValue
    }
    /// The benchmark's own CPU seconds on the posting thread, apart from the host's work there.
    var benchSeconds = 0.0
    func benchWork<Result>(_ work: () -> Result) -> Result {
        let before = ThreadTimes.currentThread()
        defer { benchSeconds += ThreadTimes.currentThread() - before }
        return work()
    }
    let postingThread = ThreadTimes.currentThreadID()
    let start = ContinuousClock.now
    let cpuBefore = cpuSeconds()
    let threadsBefore = ThreadTimes.now()
    let poster: ControlConnection? = viaSocket ? try? ControlConnection(path: socket) : nil
    if viaSocket { _ = try? poster?.readLine() }  // hello
    // Events are built a few hundred at a time, then posted — moved into the bus, as a poster
    // that builds and posts one at a time does — so the building is timed apart cheaply.
    let buildBatch = 256
    let built = UnsafeMutablePointer<Event>.allocate(capacity: buildBatch)
    defer { built.deallocate() }
    var posted = 0
    while posted < events {
        let delivered = benchWork { Int(tailing("delivered") ?? 0) }
        let chunk = min(events - posted, max(0, delivered + window - posted), 20_000)
        if chunk == 0 {
            // Not more often: each look is a request the control loop answers, counted as the host's.
            System.sleep(for: .microseconds(1_000))
            continue
        }
        if let poster {
            // All of it is the client's work (the host's runs on the control loop).
            benchWork {
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
            }
        } else {
            for batchStart in stride(from: posted, to: posted + chunk, by: buildBatch) {
                let count = min(buildBatch, posted + chunk - batchStart)
                benchWork {
                    for offset in 0..<count {
                        (built + offset).initialize(to: Event(name: "bench.tail", source: "bench", fields: [
                            "n": .int(Int64(firstValue + batchStart + offset)), "host": "web-1", "latency_ms": .double(12.5)]))
                    }
                }
                for offset in 0..<count { host.bus.post((built + offset).move()) }
            }
        }
        posted += chunk
    }
    // A tail that lost events never reaches its `--count`: stopped, and the run reported with
    // its drops rather than waited for.
    var dropped = benchWork { tailing("dropped") ?? 0 }
    while tail.isRunning {
        dropped = benchWork { tailing("dropped") ?? dropped }
        if dropped > 0 {
            tail.terminate()
            break
        }
        System.sleep(for: .microseconds(20_000))
    }
    tail.waitUntilExit()
    let elapsed = ContinuousClock.now - start
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    guard tail.terminationStatus == 0 || dropped > 0 else {
        print("\(label): the tail exited with status \(tail.terminationStatus)")
        return nil
    }
    let cpuAfter = cpuSeconds()
    let threads = ThreadTimes.now().since(threadsBefore)
    let hostSeconds = cpuAfter.host - cpuBefore.host - benchSeconds
    let posting = (postingThread.flatMap { threads[$0]?.seconds } ?? 0) - benchSeconds
    let control = threads.values.filter { $0.name == "eventbus.ctrl" }.reduce(0) { $0 + $1.seconds }
    return TailRun(label: label, events: events, seconds: seconds, dropped: dropped,
                   cpu: (hostSeconds, benchSeconds, cpuAfter.cli - cpuBefore.cli),
                   hostThreads: (posting, control, hostSeconds - posting - control), pacingRequests: pacingRequests)
}

private func stats(_ socket: String) -> JSON? {
    guard let connection = try? ControlConnection(path: socket) else { return nil }
    _ = try? connection.readLine()
    try? connection.send(["op": "stats"])
    return try? connection.readJSON()
}
