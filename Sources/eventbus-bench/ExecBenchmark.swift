import Foundation

// Exec benchmark: delivery into one trivial module that reads every event — a Swift module in a
// worker process (FixtureLatencyProbe), a compiled exec program (latency_probe.c, built with cc
// for the run) and a Python one with the helper (latency_probe.py), both from
// Tests/Fixtures/exec-modules — side by side in one run, each loaded by a real BusHost from its
// config (``moduleRun``). The exec programs also post one event back for every 1,000.
//
// - throughput: `events` posted as fast as one thread can, until the module's report arrives
//   (its mailbox holds them all: nothing is dropped).
// - latency: 1,000 events/s for `latencySeconds`; p50 and p99 of post → the program's read
//   (CLOCK_MONOTONIC in both processes).

func execBenchmark(events: Int, latencySeconds: Int = 3) async {
    let tool = ((try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0])
    let build = (tool as NSString).deletingLastPathComponent
    var folder = build
    while !FileManager.default.fileExists(atPath: folder + "/Tests/Fixtures/exec-modules/latency_probe.c") {
        guard folder != "/" else {
            print("Tests/Fixtures/exec-modules not found above \(build): run the benchmark from the repository's build")
            exit(1)
        }
        folder = (folder as NSString).deletingLastPathComponent
    }
    let fixtures = folder + "/Tests/Fixtures/exec-modules"
    let directory = NSTemporaryDirectory() + "eventbus-bench-exec-\(getpid())"
    try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let compiled = directory + "/latency_probe"
    let cc = Process()
    cc.executableURL = URL(fileURLWithPath: "/usr/bin/cc")
    cc.arguments = ["-O2", "-o", compiled, fixtures + "/latency_probe.c"]
    guard (try? cc.run()) != nil else {
        print("cannot run /usr/bin/cc to build the compiled exec module")
        exit(1)
    }
    cc.waitUntilExit()
    guard cc.terminationStatus == 0 else { exit(1) }
    print("exec benchmark: \(events) events for throughput, 1k events/s for \(latencySeconds) s for latency, \(ProcessInfo.processInfo.activeProcessorCount) cores")
    // Subscribed by the host before the program starts: the run posts at once, before a
    // program (Python's start takes tens of milliseconds) could have subscribed itself.
    let subscribe = "\nsubscribe: [\"bench.event\", \"bench.report\"]"
    let modules = [
        ("swift worker", "path: \(build)/libFixtureLatencyProbe.so\nisolation: process"),
        ("exec C", "exec: [\"\(compiled)\"]" + subscribe),
        ("exec Python", "exec: [\"\(fixtures)/latency_probe.py\"]" + subscribe),
    ]
    var runs: [IsolationRun] = []
    for (label, entry) in modules {
        guard let run = await moduleRun(label: label, entry: entry, events: events, latencySeconds: latencySeconds, rate: 1_000) else { exit(1) }
        runs.append(run)
    }
    func micros(_ nanoseconds: Int64) -> String { String(format: "%.1f µs", Double(nanoseconds) / 1000) }
    print("")
    print("module          events/s     handled   dropped   p50 @1k/s    p99 @1k/s")
    for run in runs {
        print("\(run.mode.padding(toLength: 14, withPad: " ", startingAt: 0))  "
              + String(format: "%9.0f", run.throughput) + "   \(String(run.handled).leftPadded(7))   \(String(run.dropped).leftPadded(7))   "
              + micros(run.p50).leftPadded(10) + "   " + micros(run.p99).leftPadded(10))
    }
    let worker = runs[0], compiledRun = runs[1], python = runs[2]
    let ratio = compiledRun.throughput / worker.throughput
    print("")
    print(String(format: "compiled exec / Swift worker throughput: %.2f×  (target ≥ 0.50×: %@)", ratio, ratio >= 0.5 ? "met" : "MISSED"))
    print(String(format: "Python exec throughput: %.0f events/s  (target ≥ 50,000: %@)", python.throughput,
                 python.throughput >= 50_000 ? "met" : "MISSED"))
    print(String(format: "compiled exec p99 at 1k events/s: %@  (target ≤ 2 ms: %@)", micros(compiledRun.p99),
                 compiledRun.p99 <= 2_000_000 ? "met" : "MISSED"))
}
