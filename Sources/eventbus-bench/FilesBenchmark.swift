import EventBusKit
import EventSources
import Foundation
import Synchronization
import SystemCalls
#if canImport(Glibc)
import Glibc
#endif

// Files benchmark: a storm of file creations in a temporary directory, watched by the bus's
// inotify source and, on an identical storm in the same run, by `inotifywait -m -r` (inotify-tools).
// Each file's name carries the CLOCK_MONOTONIC time just before its creation, so both watchers'
// write → subscriber latency is measured the same way: the time the subscriber (a bus sink; the
// line read from inotifywait's stdout) sees `created`, minus that stamp.
//
// The storm is written by a child process (`eventbus-bench files-storm DIR COUNT`) in both cases,
// so neither watcher shares a process — and, with the kernel's autogroup scheduling, a CPU share —
// with the writer: with the writer as a thread of the bus's process, the bus's reader waited for
// CPU behind it (p99 30–65 ms) while inotifywait, a process of its own, did not.

/// What one watcher made of one storm.
struct StormResult {
    var events = 0
    var created = 0
    var overflows = 0
    var seconds = 0.0
    var latencies: [UInt64] = []
    /// CPU the watcher used for the storm: this process's for the bus (its reader thread and the
    /// subscriber), inotifywait's own for it. On this shared machine events/s move with the
    /// others' load and with whether the queue overflowed; the CPU an event costs moves less.
    var cpuSeconds = 0.0

    var eventsPerSecond: Double { Double(events) / seconds }
    var cpuMicrosecondsPerEvent: Double { cpuSeconds / Double(max(events, 1)) * 1e6 }

    func percentile(_ p: Double) -> Double {
        guard !latencies.isEmpty else { return .nan }
        let sorted = latencies.sorted()
        return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1e6
    }
}

/// Collects what a watcher reports, from its own thread.
final class StormRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var result = StormResult()
    private var first = UInt64.max
    private var last: UInt64 = 0

    init(expected: Int) { result.latencies.reserveCapacity(expected) }

    /// One event; `name` is the created file's name when it is a creation.
    func record(createdName name: Substring?, overflow: Bool = false) {
        let now = MonotonicClock.now()
        lock.lock()
        result.events += 1
        if overflow { result.overflows += 1 }
        if let name, let dash = name.firstIndex(of: "-"), let stamp = UInt64(name[name.index(after: dash)...]) {
            result.created += 1
            result.latencies.append(now &- stamp)
            first = min(first, stamp)
        }
        last = now
        lock.unlock()
    }

    var created: Int { lock.lock(); defer { lock.unlock() }; return result.created }

    /// From the first file's creation to the last event seen.
    func finish() -> StormResult {
        lock.lock()
        defer { lock.unlock() }
        var done = result
        done.seconds = Double(last &- first) / 1e9
        return done
    }
}

/// CPU seconds (user + system) used so far by this process.
func processCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// CPU seconds used so far by process `pid`: utime + stime of /proc/<pid>/stat (fields 14 and 15,
/// in clock ticks); 0 when it cannot be read.
func processCPUSeconds(of pid: Int32) -> Double {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let end = stat.lastIndex(of: ")") else { return 0 }
    let fields = stat[stat.index(after: end)...].split(separator: " ")
    guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// `files-storm DIR COUNT`: creates `count` empty files named `<i>-<monotonic ns>` in `directory`.
func createStorm(in directory: String, count: Int) {
    for i in 0..<count {
        let path = "\(directory)/\(i)-\(MonotonicClock.now())"
        let fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
        if fd >= 0 { close(fd) }
    }
}

/// Runs the storm in a child process (see the top of this file) and waits for it to finish.
/// `posix_spawn` rather than Foundation's `Process`, which fails under valgrind (EBADF: it closes
/// descriptors valgrind keeps for itself), so the reader can be profiled with callgrind.
func runStorm(in directory: String, count: Int) {
    let arguments = [CommandLine.arguments[0], "files-storm", directory, String(count)]
    var argv = arguments.map { strdup($0) } + [nil]
    defer { for argument in argv { free(argument) } }
    var child: pid_t = 0
    let failed = posix_spawn(&child, argv[0]!, nil, nil, &argv, environ)
    guard failed == 0 else { fatalError("cannot run the storm writer: \(String(cString: strerror(failed)))") }
    _ = try? System.waitForExit(of: child)
}

/// Waits until `recorder` has seen `count` creations, or `timeout` seconds without progress.
func awaitStorm(_ recorder: StormRecorder, count: Int, timeout: Double = 10) {
    var seen = -1
    var stalledSince = MonotonicClock.now()
    while recorder.created < count {
        let now = recorder.created
        if now != seen {
            seen = now
            stalledSince = MonotonicClock.now()
        } else if Double(MonotonicClock.now() - stalledSince) / 1e9 > timeout {
            print("  (gave up waiting: \(now) of \(count) creations seen)")
            return
        }
        usleep(1000)
    }
}

func makeStormDirectory(in base: String) -> String {
    var template = Array("\(base)/eventbus-bench-files-XXXXXX".utf8CString)
    return template.withUnsafeMutableBufferPointer { buffer in
        guard let made = mkdtemp(buffer.baseAddress!) else { fatalError("mkdtemp in \(base): \(errno)") }
        return String(cString: made)
    }
}

func busStorm(files: Int, base: String) -> StormResult {
    let directory = makeStormDirectory(in: base)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let monitor = FileChangeMonitor()
    let bus = Bus()
    FileSources.register(on: bus, monitor: monitor)
    let recorder = StormRecorder(expected: files)
    let sink = try! bus.files(at: directory).sink { event in
        // Runs on the monitor's queue: the subscriber sees the event as soon as the bus posts it.
        if event.name == "fs.created", let path = event["path"]?.stringValue, let slash = path.lastIndex(of: "/") {
            recorder.record(createdName: path[path.index(after: slash)...])
        } else {
            recorder.record(createdName: nil, overflow: event.name == "fs.overflow")
        }
    }
    _ = monitor.statistics  // armed
    let cpuBefore = processCPUSeconds()
    runStorm(in: directory, count: files)
    awaitStorm(recorder, count: files)
    var result = recorder.finish()
    result.cpuSeconds = processCPUSeconds() - cpuBefore
    sink.cancel()
    return result
}

/// `files-reader [files] [directory]`: one storm watched by the bus's source alone, with a
/// subscriber that only counts — the reader's path (read, parse, dispatch, snapshot, post) and
/// little else, for profiling. Under callgrind keep `files` ≤ 8000: two events per file, and the
/// kernel's queue (16384 events by default) must hold what a slowed-down reader has not taken yet,
/// or the profile measures a rescan.
func filesReaderBenchmark(files: Int, base: String) {
    let directory = makeStormDirectory(in: base)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let monitor = FileChangeMonitor()
    let bus = Bus()
    FileSources.register(on: bus, monitor: monitor)
    let events = Atomic<Int>(0), overflows = Atomic<Int>(0)
    let sink = try! bus.files(at: directory).sink { event in
        events.add(1, ordering: .relaxed)
        if event.name == "fs.overflow" { overflows.add(1, ordering: .relaxed) }
    }
    _ = monitor.statistics  // armed
    let cpuBefore = processCPUSeconds()
    let start = MonotonicClock.now()
    runStorm(in: directory, count: files)
    var seen = -1
    while events.load(ordering: .relaxed) != seen {  // until 100 ms pass without an event
        seen = events.load(ordering: .relaxed)
        usleep(100_000)
    }
    let cpu = processCPUSeconds() - cpuBefore
    sink.cancel()
    print(String(format: "files-reader: %d files, %d events, %d overflows, %.3f s, CPU %.2f µs per event",
                 files, seen, overflows.load(ordering: .relaxed), Double(MonotonicClock.now() - start) / 1e9 - 0.1,
                 cpu / Double(max(seen, 1)) * 1e6))
}

func inotifywaitStorm(files: Int, base: String) -> StormResult? {
    let directory = makeStormDirectory(in: base)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/inotifywait")
    // The same events the bus source asks the kernel for.
    process.arguments = ["-m", "-r", "-e", "create,modify,close_write,delete,attrib,move,delete_self,move_self",
                         "--format", "%e %f", directory]
    let output = Pipe(), errors = Pipe()
    process.standardOutput = output
    process.standardError = errors
    do { try process.run() } catch {
        print("  inotifywait: \(error) (install inotify-tools: bash .ci/setup)")
        return nil
    }
    defer {
        process.terminate()
        process.waitUntilExit()
    }
    // It says "Watches established." on stderr once it is watching.
    var banner = Data()
    while !(String(decoding: banner, as: UTF8.self).contains("Watches established")) {
        let chunk = errors.fileHandleForReading.availableData
        if chunk.isEmpty { return nil }
        banner.append(chunk)
    }

    let recorder = StormRecorder(expected: files)
    let cpuBefore = processCPUSeconds(of: process.processIdentifier)
    let fd = output.fileHandleForReading.fileDescriptor
    let reader = Thread {
        var pending: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count <= 0 { return }
            pending.append(contentsOf: buffer[0..<count])
            var lineStart = 0
            for index in 0..<pending.count where pending[index] == UInt8(ascii: "\n") {
                let line = Substring(decoding: pending[lineStart..<index], as: UTF8.self)
                lineStart = index + 1
                if line.hasPrefix("CREATE ") {
                    recorder.record(createdName: line.dropFirst("CREATE ".count))
                } else {
                    recorder.record(createdName: nil, overflow: line.hasPrefix("Q_OVERFLOW"))
                }
            }
            pending.removeFirst(lineStart)
        }
    }
    reader.start()
    runStorm(in: directory, count: files)
    awaitStorm(recorder, count: files)
    var result = recorder.finish()
    result.cpuSeconds = processCPUSeconds(of: process.processIdentifier) - cpuBefore
    return result
}

func filesBenchmark(files: Int, base: String, rounds: Int) {
    print("files: \(files) file creations per storm in \(base), \(rounds) rounds, alternating watchers")
    print("each file = 2 events (created, closed); latency = write → subscriber, on created")
    print("watcher       round  events/s   created  overflows  p50 ms  p99 ms  max ms  CPU µs/event")
    var bus: [StormResult] = [], anchor: [StormResult] = []
    func line(_ name: String, _ round: Int, _ r: StormResult) {
        print(name.padding(toLength: 12, withPad: " ", startingAt: 0)
            + String(format: "  %5d  %8.0f  %8d  %9d  %6.3f  %6.3f  %6.2f  %12.2f", round, r.eventsPerSecond,
                     r.created, r.overflows, r.percentile(0.5), r.percentile(0.99), r.percentile(1.0),
                     r.cpuMicrosecondsPerEvent))
    }
    for round in 1...rounds {
        let ours = busStorm(files: files, base: base)
        bus.append(ours)
        line("EventBus", round, ours)
        if let theirs = inotifywaitStorm(files: files, base: base) {
            anchor.append(theirs)
            line("inotifywait", round, theirs)
        }
    }
    func median(_ results: [StormResult], _ value: (StormResult) -> Double) -> Double {
        let sorted = results.map(value).sorted()
        return sorted.isEmpty ? .nan : sorted[sorted.count / 2]
    }
    print(String(format: "median        EventBus %.0f events/s, p50 %.3f ms, p99 %.3f ms, %.2f CPU µs/event | inotifywait %.0f events/s, p50 %.3f ms, p99 %.3f ms, %.2f CPU µs/event",
                 median(bus, \.eventsPerSecond), median(bus) { $0.percentile(0.5) }, median(bus) { $0.percentile(0.99) },
                 median(bus, \.cpuMicrosecondsPerEvent),
                 median(anchor, \.eventsPerSecond), median(anchor) { $0.percentile(0.5) }, median(anchor) { $0.percentile(0.99) },
                 median(anchor, \.cpuMicrosecondsPerEvent)))
    print("Targets: EventBus p99 ≤ 2 ms, EventBus events/s ≥ inotifywait's.")
}
