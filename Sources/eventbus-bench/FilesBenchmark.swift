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
    /// The latency breakdown of a storm watched with stage records (see `FileStageRecord`).
    var stages: StageBreakdown?

    var eventsPerSecond: Double { Double(events) / seconds }
    var cpuMicrosecondsPerEvent: Double { cpuSeconds / Double(max(events, 1)) * 1e6 }

    func percentile(_ p: Double) -> Double {
        guard !latencies.isEmpty else { return .nan }
        let sorted = latencies.sorted()
        return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1e6
    }
}

/// Where the time of the bus's created events went, stage by stage (ns, one entry per event with
/// a stage record): write → read (the kernel, and waiting in its queue), read → resolved (decoding,
/// path, snapshot, pairing — and the handling of the events before it in the same read),
/// resolved → subscriber (the change made an `Event` and the bus's delivery).
struct StageBreakdown {
    var writeToRead: [Int64] = []
    var readToResolved: [Int64] = []
    var resolvedToSubscriber: [Int64] = []
    /// Posted events per read(2), one entry per read.
    var eventsPerRead: [Int64] = []

    /// Joins what the subscriber saw of created events with the monitor's records, by sequence.
    init(created: [CreatedSighting], records: [FileStageRecord]) {
        var bySequence = [UInt64: FileStageRecord](minimumCapacity: records.count)
        for record in records { bySequence[record.sequence] = record }
        for seen in created {
            guard let record = bySequence[seen.sequence] else { continue }
            writeToRead.append(Int64(bitPattern: record.read &- seen.written))
            readToResolved.append(Int64(bitPattern: record.resolved &- record.read))
            resolvedToSubscriber.append(Int64(bitPattern: seen.delivered &- record.resolved))
        }
        var run: Int64 = 0
        for (index, record) in records.enumerated() {
            run += 1
            if index + 1 == records.count || records[index + 1].read != record.read {
                eventsPerRead.append(run)
                run = 0
            }
        }
    }

    static func percentile(_ values: [Int64], _ p: Double) -> Double {
        guard !values.isEmpty else { return .nan }
        let sorted = values.sorted()
        return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))])
    }

    /// `p50/p99` of each stage in ms, and of the events per read.
    var summary: String {
        func ms(_ values: [Int64]) -> String {
            String(format: "%.3f/%.3f", Self.percentile(values, 0.5) / 1e6, Self.percentile(values, 0.99) / 1e6)
        }
        return "write→read \(ms(writeToRead))  read→resolved \(ms(readToResolved))"
            + "  resolved→subscriber \(ms(resolvedToSubscriber)) ms  events/read "
            + String(format: "%.0f/%.0f", Self.percentile(eventsPerRead, 0.5), Self.percentile(eventsPerRead, 0.99))
    }
}

/// A created event as the bus's subscriber saw it (`CLOCK_MONOTONIC` ns).
struct CreatedSighting {
    var sequence: UInt64
    /// The stamp in the file's name: just before the writer created it.
    var written: UInt64
    var delivered: UInt64
}

/// Collects what a watcher reports, from its own thread.
final class StormRecorder: @unchecked Sendable {
    private let lock = NSLock()
    private var result = StormResult()
    private var first = UInt64.max
    private var last: UInt64 = 0
    private(set) var sightings: [CreatedSighting] = []
    /// The bus's created events as its subscriber took them (see ``recordCreated(path:sequence:)``),
    /// parsed by ``finish()``.
    private var unparsed: [(delivered: UInt64, path: String, sequence: UInt64)] = []

    /// Room for `expected` creations, its pages touched here: the benchmark's own memory, which a
    /// storm should not pay for as the bus's CPU (inotifywait's lines are taken by a thread whose
    /// CPU is not counted).
    init(expected: Int) {
        result.latencies.reserveCapacity(expected)
        unparsed = Array(repeating: (0, "", 0), count: expected)
        unparsed.removeAll(keepingCapacity: true)
    }

    /// One event; `name` is the created file's name when it is a creation.
    func record(createdName name: Substring?, overflow: Bool = false) {
        let now = MonotonicClock.now()
        lock.lock()
        result.events += 1
        if overflow { result.overflows += 1 }
        if let name { noteCreated(name: name, sequence: 0, delivered: now) }
        last = now
        lock.unlock()
    }

    /// One created event seen by the bus's subscriber: only the time is taken and the path kept;
    /// its stamp is parsed after the storm. Why: the CPU counted for the bus is its process's,
    /// and it should be the source's and the delivery's — as inotifywait's is its reading and
    /// printing, while its lines are parsed by a thread of this process that is not counted.
    /// `sequence`: the bus's number of the event when its stages are recorded, else 0.
    func recordCreated(path: String, sequence: UInt64 = 0) {
        let now = MonotonicClock.now()
        lock.lock()
        result.events += 1
        result.created += 1
        unparsed.append((now, path, sequence))
        last = now
        lock.unlock()
    }

    var created: Int { lock.lock(); defer { lock.unlock() }; return result.created }

    /// From the first file's creation to the last event seen.
    func finish() -> StormResult {
        lock.lock()
        defer { lock.unlock() }
        result.created -= unparsed.count  // counted again as they are parsed
        for entry in unparsed {
            let name = entry.path.lastIndex(of: "/").map { entry.path[entry.path.index(after: $0)...] } ?? entry.path[...]
            noteCreated(name: name, sequence: entry.sequence, delivered: entry.delivered)
        }
        unparsed = []
        var done = result
        done.seconds = Double(last &- first) / 1e9
        return done
    }

    /// Under the lock: a created file `name` (`<index>-<stamp>`) seen at `delivered`; `sequence`
    /// as for ``recordCreated(path:sequence:)``.
    private func noteCreated(name: Substring, sequence: UInt64, delivered: UInt64) {
        guard let dash = name.firstIndex(of: "-"), let stamp = UInt64(name[name.index(after: dash)...]) else { return }
        result.created += 1
        result.latencies.append(delivered &- stamp)
        first = min(first, stamp)
        if sequence != 0 {
            sightings.append(CreatedSighting(sequence: sequence, written: stamp, delivered: delivered))
        }
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
    let child: pid_t
    do { child = try System.spawn(arguments[0], arguments: arguments) } catch {
        fatalError("cannot run the storm writer: \(error.reason)")
    }
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
        System.sleep(for: .microseconds(1000))
    }
}

func makeStormDirectory(in base: String) -> String {
    var template = Array("\(base)/eventbus-bench-files-XXXXXX".utf8CString)
    return template.withUnsafeMutableBufferPointer { buffer in
        guard let made = mkdtemp(buffer.baseAddress!) else { fatalError("mkdtemp in \(base): \(errno)") }
        return String(cString: made)
    }
}

/// One storm watched by the bus's source; `recordingStages`: with its latency breakdown (which
/// costs a clock read and a record per event in the source).
func busStorm(files: Int, base: String, recordingStages: Bool = false) -> StormResult {
    let directory = makeStormDirectory(in: base)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let monitor = FileChangeMonitor(recordingStages: recordingStages)
    let bus = Bus()
    FileSources.register(on: bus, monitor: monitor)
    let recorder = StormRecorder(expected: files)
    let sink = try! bus.files(at: directory).sink { event in
        // Runs on the monitor's queue: the subscriber sees the event as soon as the bus posts it.
        if event.name == "fs.created", let path = event["path"]?.stringValue {
            recorder.recordCreated(path: path, sequence: recordingStages ? event.sequence : 0)
        } else {
            recorder.record(createdName: nil, overflow: event.name == "fs.overflow")
        }
    }
    _ = monitor.statistics  // armed
    let cpuBefore = processCPUSeconds()
    runStorm(in: directory, count: files)
    awaitStorm(recorder, count: files)
    // Before `finish()`, which parses every name's stamp: that is the benchmark's work, as the
    // parsing of inotifywait's lines is (on a thread of this process, not counted for it).
    let cpuSeconds = processCPUSeconds() - cpuBefore
    var result = recorder.finish()
    result.cpuSeconds = cpuSeconds
    sink.cancel()
    if recordingStages {
        result.stages = StageBreakdown(created: recorder.sightings, records: monitor.takeStageRecords())
    }
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
        System.sleep(for: .microseconds(100_000))
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

/// `hog N`: N threads that spin until the process is killed — the CPU hog of `files --hog N`,
/// a process of its own so that the bus's CPU per event does not count it.
func spinForever(threads: Int) -> Never {
    for _ in 0..<threads {
        Thread {
            var x: UInt64 = 1
            while true { x = x &* 6364136223846793005 &+ 1442695040888963407; if x == 0 { print(x) } }
        }.start()
    }
    while true { sleep(3600) }
}

/// Starts `hog N` as a child process; returns its pid.
func startHog(threads: Int) -> pid_t {
    let arguments = [CommandLine.arguments[0], "hog", String(threads)]
    do { return try System.spawn(arguments[0], arguments: arguments) } catch {
        fatalError("cannot start the CPU hog: \(error.reason)")
    }
}

func stopHog(_ pid: pid_t) {
    try? System.sendSignal(SIGKILL, to: pid)
    _ = try? System.waitForExit(of: pid)
}

/// `files`/`storm`: each round a storm watched by the bus's source, the same with its stage
/// records (the latency breakdown), and one watched by inotifywait. `hog`: that many spinning
/// threads in a child process meanwhile.
func filesBenchmark(files: Int, base: String, rounds: Int, hog: Int = 0) {
    print("files: \(files) file creations per storm in \(base), \(rounds) rounds, alternating watchers"
        + (hog > 0 ? ", \(hog) spinning threads (a child process) on \(ProcessInfo.processInfo.activeProcessorCount) cores" : ""))
    print("each file = 2 events (created, closed); latency = write → subscriber, on created")
    print("watcher          round  events/s   created  overflows  p50 ms  p99 ms  max ms  CPU µs/event")
    let hogProcess = hog > 0 ? startHog(threads: hog) : nil
    defer { if let hogProcess { stopHog(hogProcess) } }
    var bus: [StormResult] = [], staged: [StormResult] = [], anchor: [StormResult] = []
    func line(_ name: String, _ round: Int, _ r: StormResult) {
        print(name.padding(toLength: 15, withPad: " ", startingAt: 0)
            + String(format: "  %5d  %8.0f  %8d  %9d  %6.3f  %6.3f  %6.2f  %12.2f", round, r.eventsPerSecond,
                     r.created, r.overflows, r.percentile(0.5), r.percentile(0.99), r.percentile(1.0),
                     r.cpuMicrosecondsPerEvent))
    }
    for round in 1...rounds {
        let ours = busStorm(files: files, base: base)
        bus.append(ours)
        line("EventBus", round, ours)
        let stamped = busStorm(files: files, base: base, recordingStages: true)
        staged.append(stamped)
        line("EventBus+stages", round, stamped)
        if let stages = stamped.stages { print("  stages p50/p99: " + stages.summary) }
        if let theirs = inotifywaitStorm(files: files, base: base) {
            anchor.append(theirs)
            line("inotifywait", round, theirs)
        }
    }
    func median(_ results: [StormResult], _ value: (StormResult) -> Double) -> Double {
        let sorted = results.map(value).sorted()
        return sorted.isEmpty ? .nan : sorted[sorted.count / 2]
    }
    func summary(_ results: [StormResult]) -> String {
        String(format: "%.0f events/s, p50 %.3f ms, p99 %.3f ms, %.2f CPU µs/event", median(results, \.eventsPerSecond),
               median(results) { $0.percentile(0.5) }, median(results) { $0.percentile(0.99) },
               median(results, \.cpuMicrosecondsPerEvent))
    }
    print("median  EventBus \(summary(bus)) | inotifywait \(summary(anchor))")
    print("median  EventBus+stages \(summary(staged))")
    func stageMedian(_ stage: KeyPath<StageBreakdown, [Int64]>, _ p: Double, scale: Double = 1e6) -> String {
        String(format: "%.3f", median(staged) { $0.stages.map { StageBreakdown.percentile($0[keyPath: stage], p) / scale } ?? .nan })
    }
    print("median stages p50/p99 ms: write→read \(stageMedian(\.writeToRead, 0.5))/\(stageMedian(\.writeToRead, 0.99))"
        + "  read→resolved \(stageMedian(\.readToResolved, 0.5))/\(stageMedian(\.readToResolved, 0.99))"
        + "  resolved→subscriber \(stageMedian(\.resolvedToSubscriber, 0.5))/\(stageMedian(\.resolvedToSubscriber, 0.99))"
        + "  events/read \(stageMedian(\.eventsPerRead, 0.5, scale: 1))/\(stageMedian(\.eventsPerRead, 0.99, scale: 1))")
    let ratio = { (value: (StormResult) -> Double) in median(bus, value) / median(anchor, value) }
    print(String(format: "EventBus / inotifywait (medians): p50 %.2f×, p99 %.2f×, events/s %.2f×, CPU per event %.2f×",
                 ratio { $0.percentile(0.5) }, ratio { $0.percentile(0.99) }, ratio(\.eventsPerSecond),
                 ratio(\.cpuMicrosecondsPerEvent)))
    print("Targets: p50 and p99 ≤ 1.2×, events/s ≥ 1×, CPU per event ≤ 1.2× inotifywait's.")
}
