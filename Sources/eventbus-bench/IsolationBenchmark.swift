import EventBusHost
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import Synchronization
import SystemCalls

// Isolation benchmark: delivery into one module running in eventbusd (`isolation: none`) and
// in a worker process (`isolation: process`), side by side in one run. The module is the
// FixtureLatencyProbe fixture: it records, for each event, CLOCK_MONOTONIC at arrival minus the
// event's monotonic time (set when it was made, right before `post`), and reports the count and
// percentiles when asked. The host is a real BusHost in this process with the module loaded
// from its config, so both runs take the paths eventbusd takes.
//
// - throughput: `events` posted as fast as one thread can, timed from the first post until the
//   module's report (posted after the last event) arrives; the mailbox holds them all, so
//   nothing is dropped (a drop is reported, it would make the rate meaningless).
// - latency: 10,000 events/s offered (one every 100 µs, paced by absolute sleeps on the
//   monotonic clock) for `latencySeconds`; p50 and p99 of post → module handler.

struct IsolationRun {
    var mode: String
    var throughput: Double
    var handled: Int64
    var dropped: UInt64
    var p50: Int64
    var p99: Int64
    var latencyHandled: Int64
}

func isolationBenchmark(events: Int, latencySeconds: Int = 3) async {
    let tool = ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
    let build = (tool as NSString).deletingLastPathComponent
    let probe = build + "/libFixtureLatencyProbe.so"
    print("isolation benchmark: \(events) events for throughput, 10k events/s for \(latencySeconds) s for latency, \(ProcessInfo.processInfo.activeProcessorCount) cores")
    print("module: \(probe)")
    var runs: [IsolationRun] = []
    for mode in ["none", "process"] {
        guard let run = await moduleRun(label: mode, entry: "path: \(probe)\nisolation: \(mode)", events: events,
                                        latencySeconds: latencySeconds, rate: 10_000) else { exit(1) }
        runs.append(run)
    }
    func micros(_ nanoseconds: Int64) -> String { String(format: "%.1f µs", Double(nanoseconds) / 1000) }
    print("")
    print("isolation   events/s     handled   dropped   p50 @10k/s   p99 @10k/s")
    for run in runs {
        print("\(run.mode.padding(toLength: 10, withPad: " ", startingAt: 0))  "
              + String(format: "%9.0f", run.throughput) + "   \(String(run.handled).leftPadded(7))   \(String(run.dropped).leftPadded(7))   "
              + micros(run.p50).leftPadded(10) + "   " + micros(run.p99).leftPadded(10))
    }
    let inProcess = runs[0], isolated = runs[1]
    let ratio = isolated.throughput / inProcess.throughput
    print("")
    print(String(format: "isolated / in-process throughput: %.2f×  (target ≥ 0.30×: %@)", ratio, ratio >= 0.3 ? "met" : "MISSED"))
    print(String(format: "isolated throughput: %.0f events/s  (target ≥ 500,000: %@)", isolated.throughput,
                 isolated.throughput >= 500_000 ? "met" : "MISSED"))
    print(String(format: "isolated p99 at 10k events/s: %@  (target ≤ 1 ms: %@); p99 ratio isolated / in-process %.1f×",
                 micros(isolated.p99), isolated.p99 <= 1_000_000 ? "met" : "MISSED",
                 Double(isolated.p99) / Double(max(1, inProcess.p99))))
}

/// One module — `entry`, the lines of its config entry — loaded by a real BusHost: throughput,
/// then latency at `rate` events/s for `latencySeconds`. The module answers `bench.report` with
/// `bench.result` (count, p50_ns, p99_ns), as FixtureLatencyProbe does.
func moduleRun(label mode: String, entry: String, events: Int, latencySeconds: Int, rate: Int) async -> IsolationRun? {
    let directory = NSTemporaryDirectory() + "eventbus-bench-isolation-\(getpid())-\(mode)"
    try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false,
                                             attributes: [.posixPermissions: 0o700])
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let config = directory + "/eventbus.yaml"
    precondition(FileManager.default.createFile(atPath: config, contents: Data("""
        modules:
          probe:
        \(entry.split(separator: "\n").map { "    " + $0 }.joined(separator: "\n"))
            mailbox_capacity: \(events + 10)
            mailbox_bytes: \(events + 10)KiB
        """.utf8)))
    var logger = Logger(label: "eventbus-bench")
    logger.logLevel = .warning
    let host = BusHost(configPath: config, logger: logger)
    do { try await host.start() } catch {
        print("cannot start the host: \(error)")
        return nil
    }
    guard host.moduleStatistics.first?.state == .active else {
        print("the probe module did not start (\(mode)): \(host.moduleStatistics.first?.state.description ?? "?")")
        return nil
    }
    let results = Mutex<[Event]>([])
    let subscription = try! host.bus.publisher(for: "bench.result").sink { event in results.withLock { $0.append(event) } }
    defer { subscription.cancel() }

    func report() async -> Event? {
        let before = results.withLock { $0.count }
        host.bus.post("bench.report", source: "bench")
        let deadline = ContinuousClock.now + .seconds(120)
        while ContinuousClock.now < deadline {
            if let event = results.withLock({ $0.count > before ? $0[before] : nil }) { return event }
            try? await Task.sleep(for: .microseconds(200))
        }
        print("no report from the probe (\(mode))")
        return nil
    }

    // Warm up both paths (first-use allocations, page faults, the worker's first batches).
    for index in 0..<20_000 { host.bus.post(benchEvent(index)) }
    guard await report() != nil else { return nil }

    let start = ContinuousClock.now
    for index in 0..<events { host.bus.post(benchEvent(index)) }
    guard let throughputReport = await report() else { return nil }
    let elapsed = ContinuousClock.now - start
    let handled = throughputReport["count"]?.intValue ?? 0

    // Paced: one event every 1/`rate` s (100 µs at 10k/s) on the monotonic clock, from this one thread, which sleeps
    // in between (a spinning pacer would take one of the two cores from the path measured). The
    // latency is measured from the event's creation, right after the wake-up, so timer slack
    // moves when an event is made, not what its latency reads.
    let interval = UInt64(1_000_000_000 / rate)
    let total = latencySeconds * rate
    var next = MonotonicClock.now()
    for index in 0..<total {
        next += interval
        System.sleep(untilMonotonic: next)
        host.bus.post(benchEvent(index))
    }
    guard let latencyReport = await report() else { return nil }
    let dropped = host.moduleStatistics.first?.dropped ?? 0
    _ = await host.shutdown()
    return IsolationRun(mode: mode, throughput: Double(handled) / elapsed.secondsValue,
                        handled: handled, dropped: dropped,
                        p50: latencyReport["p50_ns"]?.intValue ?? -1, p99: latencyReport["p99_ns"]?.intValue ?? -1,
                        latencyHandled: latencyReport["count"]?.intValue ?? 0)
}

/// A realistic small event: name, source, three fields (int, string, double).
private func benchEvent(_ index: Int) -> Event {
    Event(name: "bench.event", source: "bench", fields: ["n": .int(Int64(index)), "host": "web-01", "load": 0.25])
}

extension String {
    func leftPadded(_ width: Int) -> String { String(repeating: " ", count: max(0, width - count)) + self }
}
