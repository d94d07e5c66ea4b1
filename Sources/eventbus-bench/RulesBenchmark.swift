import EventBusHost
import EventBusKit
import Foundation
import Logging
import SystemCalls

// rules [rounds]: what rules cost and how fast they act, each against its anchor in the same run.
//  1. post cost with 1 000 loaded rules that match nothing, against the same host with none
//     (ns per post, alternated rounds, medians);
//  2. idle CPU of a host with 100 rules (debounce, throttle and all_of among them), over 5 s;
//  3. a file written → the rule's command running (`touch`), against `inotifywait -m | while
//     read …; do touch …; done` running the same command, both on the same folder.
func rulesBenchmark(rounds: Int) {
    print("rules: post cost with 1000 rules matching nothing, idle CPU with 100 rules, file → command latency")
    let logger = Logger(label: "bench") { _ in SwiftLogNoOpLogHandler() }
    let base = (System.isAccessible("/dev/shm", .writable) ? "/dev/shm" : "/tmp") + "/eventbus-rules-bench-\(getpid())"
    try? FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
    chmod(base, 0o700)
    defer { try? FileManager.default.removeItem(atPath: base) }

    func host(_ name: String, rules: String) -> BusHost {
        let path = "\(base)/\(name).yaml"
        try! "state_directory: \(base)/state-\(name)\nrules:\n\(rules)".write(toFile: path, atomically: true, encoding: .utf8)
        let host = BusHost(configPath: path, logger: logger)
        blockOn { try! await host.start() }
        return host
    }

    // 1. Post cost.
    let none = host("none", rules: "  []\n")
    let thousand = host("thousand", rules: (0..<1000).map { "  - { name: r\($0), on: user.never.\($0).>, where: { n: \">5\" }, log: hi }\n" }.joined())
    let posts = 1_000_000
    func nanosecondsPerPost(_ bus: Bus) -> Double {
        let names = (0..<16).map { "user.bench.\($0)" }
        let start = MonotonicClock.now()
        for index in 0..<posts { bus.post(names[index & 15], fields: ["n": .int(Int64(index))]) }
        return Double(MonotonicClock.now() - start) / Double(posts)
    }
    _ = nanosecondsPerPost(none.bus)
    _ = nanosecondsPerPost(thousand.bus)
    var ratios: [Double] = []
    var plain: [Double] = []
    var loaded: [Double] = []
    for _ in 0..<rounds {
        let without = nanosecondsPerPost(none.bus)
        let with = nanosecondsPerPost(thousand.bus)
        plain.append(without)
        loaded.append(with)
        ratios.append(with / without)
    }
    func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
    print(String(format: "  post cost: no rules %.0f ns, 1000 rules matching nothing %.0f ns per post (medians of %d rounds of %d) — ratio %.2f× (rounds %@)",
                 median(plain), median(loaded), rounds, posts, median(ratios), ratios.map { String(format: "%.2f", $0) }.joined(separator: ", ")))
    blockOn { _ = await none.shutdown(); _ = await thousand.shutdown() }

    // 2. Idle CPU.
    let idle = host("idle", rules: (0..<100).map { index -> String in
        switch index % 4 {
        case 0: return "  - { name: i\(index), on: user.x.\(index), debounce: 1s, log: hi }\n"
        case 1: return "  - { name: i\(index), on: user.x.\(index), throttle: 1m, log: hi }\n"
        case 2: return "  - { name: i\(index), all_of: [user.a.\(index), user.b.\(index)], within: 10m, log: hi }\n"
        default: return "  - { name: i\(index), on: user.x.\(index), collect: 5s, log: hi }\n"
        }
    }.joined())
    Thread.sleep(forTimeInterval: 1)
    let before = processCPUSeconds()
    Thread.sleep(forTimeInterval: 5)
    let spent = processCPUSeconds() - before
    print(String(format: "  idle CPU with 100 rules: %.4f s over 5 s (%.3f %%)", spent, spent / 5 * 100))
    blockOn { _ = await idle.shutdown() }

    // 3. File → command. Both touch DONE/<the written file's path>, so the command is the same.
    let watched = base + "/watched"
    let done = base + "/done"
    try? FileManager.default.createDirectory(atPath: watched, withIntermediateDirectories: true)
    try? FileManager.default.createDirectory(atPath: done + watched, withIntermediateDirectories: true)
    let writes = max(rounds * 20, 50)
    let rule = host("latency", rules: """
          - name: touch
            on: fs.closed
            from: { files: \(watched) }
            where: { path: "\(watched)/bus-*" }
            mode: parallel
            max: 100
            run: ["/usr/bin/touch", "\(done){{path}}"]
        """)
    Thread.sleep(forTimeInterval: 1)
    let busLatencies = writeAndTime(prefix: "bus", watched: watched, done: done, writes: writes)
    blockOn { _ = await rule.shutdown() }
    let anchor = Process()
    anchor.executableURL = URL(fileURLWithPath: "/usr/bin/setsid")
    anchor.arguments = ["/bin/sh", "-c", "inotifywait -q -m -e close_write --format %w%f \(watched) | while read -r f; do case $f in */anchor-*) touch \(done)$f;; esac; done"]
    try! anchor.run()
    Thread.sleep(forTimeInterval: 1)
    let anchorLatencies = writeAndTime(prefix: "anchor", watched: watched, done: done, writes: writes)
    try? System.sendSignal(SIGTERM, toGroup: anchor.processIdentifier)
    func p(_ values: [Double], _ q: Double) -> Double { values.isEmpty ? .nan : values[min(values.count - 1, Int(Double(values.count) * q))] }
    print(String(format: "  file written → command running: rule p50 %.2f ms p99 %.2f ms; inotifywait | while read p50 %.2f ms p99 %.2f ms (%d writes each) — p50 difference %+.2f ms",
                 p(busLatencies, 0.5), p(busLatencies, 0.99), p(anchorLatencies, 0.5), p(anchorLatencies, 0.99), writes,
                 p(busLatencies, 0.5) - p(anchorLatencies, 0.5)))
}

/// Writes `watched/PREFIX-N` files one at a time and times each until `DONE/<its path>` is seen
/// (the command's `touch` ran), in milliseconds. The marker is polled every 50 µs and timed when
/// seen: its modification time would be the kernel's coarse clock, ticks of 4 ms.
private func writeAndTime(prefix: String, watched: String, done: String, writes: Int) -> [Double] {
    var latencies: [Double] = []
    for index in 0..<writes {
        let path = "\(watched)/\(prefix)-\(index)"
        let written = realtimeNanoseconds()
        _ = FileManager.default.createFile(atPath: path, contents: Data("x".utf8))
        let marker = done + path
        let deadline = Date().addingTimeInterval(10)
        var status = stat()
        while stat(marker, &status) != 0 && Date() < deadline { System.sleep(for: .microseconds(50)) }
        let seen = realtimeNanoseconds()
        guard stat(marker, &status) == 0 else { continue }
        latencies.append(Double(seen - written) / 1e6)
        System.sleep(for: .microseconds(20_000))
    }
    return latencies.sorted()
}

private func realtimeNanoseconds() -> Int64 {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    return Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
}

/// Runs `body` to its end from synchronous code.
private func blockOn(_ body: @escaping @Sendable () async -> Void) {
    let done = DispatchSemaphore(value: 0)
    Task {
        await body()
        done.signal()
    }
    done.wait()
}
