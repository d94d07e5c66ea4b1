import ControlProtocol
import Foundation
import SystemCalls

// Soak: the example config under steady load, for memory growth. A release eventbusd runs
// `examples/eventbus.yaml` (its three modules in workers, its timers, file and journal watches)
// with a control socket of its own; one connection posts `rate` events a second (pipelined, 100
// batches a second, names spread over `user.soak.*` and `app.web.*`, which the modules
// subscribe to), and two `eventbus tail '>'` processes (JSON and human format) take everything.
// Every 10 s the host's VmRSS is sampled; the result is the growth after the warm-up, as the
// least-squares slope of RSS over time in KiB per minute — what a steady service must keep
// near zero. Run from the repository's root after `swift build -c release`.

/// RSS, threads of a process from /proc (fopen: Foundation reads /proc files as empty).
private func processStatus(_ pid: Int32) -> (rssKiB: Int, threads: Int)? {
    guard let file = fopen("/proc/\(pid)/status", "r") else { return nil }
    defer { fclose(file) }
    var rss = -1, threads = -1
    var line = [CChar](repeating: 0, count: 512)
    while fgets(&line, Int32(line.count), file) != nil {
        let text = line.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        let value = Int(text.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first?
            .trimmingCharacters(in: .whitespacesAndNewlines) ?? "") ?? -1
        if text.hasPrefix("VmRSS:") { rss = value }
        if text.hasPrefix("Threads:") { threads = Int(text.dropFirst(8).trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1 }
    }
    return (rss, threads)
}

private func secondsIn(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

/// Least-squares slope of `points` (seconds, KiB), in KiB per minute.
private func slopePerMinute(_ points: [(Double, Double)]) -> Double {
    guard points.count >= 2 else { return 0 }
    let n = Double(points.count)
    let meanX = points.map(\.0).reduce(0, +) / n, meanY = points.map(\.1).reduce(0, +) / n
    let numerator = points.map { ($0.0 - meanX) * ($0.1 - meanY) }.reduce(0, +)
    let denominator = points.map { ($0.0 - meanX) * ($0.0 - meanX) }.reduce(0, +)
    return denominator == 0 ? 0 : numerator / denominator * 60
}

func soakBenchmark(seconds: Int, rate: Int, warmUp: Int = 120) {
    let tool = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    let products = (tool as NSString).deletingLastPathComponent
    let config = FileManager.default.currentDirectoryPath + "/examples/eventbus.yaml"
    guard System.isAccessible(config, .readable), System.isAccessible(products + "/eventbusd", .executable) else {
        print("soak: run from the repository's root after swift build -c release (needs examples/eventbus.yaml, \(products)/eventbusd)")
        exit(1)
    }
    var template = Array("/tmp/eventbus-bench-soak-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { exit(1) }
    let directory = String(cString: made)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let socket = directory + "/control.sock"
    /// Starts `executable`, its output to the file `output` (made here) or discarded (nil).
    func start(_ executable: String, _ arguments: [String], output: String?) -> Process? {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var handle = FileHandle.nullDevice
        if let output {
            _ = FileManager.default.createFile(atPath: output, contents: nil)
            handle = FileHandle(forWritingAtPath: output) ?? .nullDevice
        }
        process.standardOutput = handle
        process.standardError = handle
        do { try process.run() } catch {
            print("soak: cannot start \(executable): \(error)")
            return nil
        }
        return process
    }
    guard let host = start(products + "/eventbusd", ["--config", config, "--socket", socket], output: directory + "/eventbusd.log") else { exit(1) }
    defer { if host.isRunning { try? System.sendSignal(SIGKILL, to: host.processIdentifier) } }
    var connection: ControlConnection?
    for _ in 0..<300 where connection == nil {
        connection = try? ControlConnection(path: socket)
        if connection == nil { System.sleep(for: .microseconds(100_000)) }
    }
    guard let poster = connection, (try? poster.readLine()) != nil else {
        print("soak: eventbusd did not open \(socket): \((try? String(contentsOfFile: directory + "/eventbusd.log", encoding: .utf8)) ?? "")")
        exit(1)
    }
    let tails = [["--json"], []].compactMap { format in
        start(products + "/eventbus", ["tail", "--socket", socket] + format + [">"], output: nil)
    }
    defer { for tail in tails where tail.isRunning { try? System.sendSignal(SIGKILL, to: tail.processIdentifier) } }
    print("soak: \(seconds) s, \(rate) posts/s over the control socket, 2 tails of '>', examples/eventbus.yaml; RSS every 10 s")

    let names = (0..<20).map { "user.soak.n\($0)" } + (0..<20).map { "app.web.s\($0)" }
    let batch = max(1, rate / 100)
    let begin = ContinuousClock.now
    var sent = 0, errors = 0, nextSample = 0
    var samples: [(Double, Double)] = []
    var threadCounts: [Int] = []  // after the warm-up
    while true {
        let elapsedSeconds = secondsIn(ContinuousClock.now - begin)
        if elapsedSeconds >= Double(nextSample) {
            guard let status = processStatus(host.processIdentifier) else {
                print("soak: eventbusd is gone: \((try? String(contentsOfFile: directory + "/eventbusd.log", encoding: .utf8)) ?? "")")
                exit(1)
            }
            samples.append((elapsedSeconds, Double(status.rssKiB)))
            if elapsedSeconds >= Double(warmUp) { threadCounts.append(status.threads) }
            if nextSample % 60 == 0 {
                print(String(format: "  %4d s  RSS %6.1f MB  threads %d  posted %d", nextSample, Double(status.rssKiB) / 1024, status.threads, sent))
            }
            nextSample += 10
        }
        guard elapsedSeconds < Double(seconds) else { break }
        var lines = [UInt8]()
        for _ in 0..<batch {
            let line = JSONWriter.line(["op": "post", "name": .string(names[sent % names.count]),
                                        "fields": ["i": .int(Int64(sent)), "level": "info", "host": "soak"]])
            lines += line
            sent += 1
        }
        do {
            try poster.send(lines)
            for _ in 0..<batch {
                guard let answer = try poster.readLine() else { throw CocoaError(.fileReadUnknown) }
                if answer.starts(with: Array(#"{"type":"error""#.utf8)) { errors += 1 }
            }
        } catch {
            print("soak: the control connection failed: \(error)")
            exit(1)
        }
        let due = begin + .microseconds(Int64(sent) * 1_000_000 / Int64(rate))
        if due > ContinuousClock.now { Thread.sleep(forTimeInterval: secondsIn(due - ContinuousClock.now)) }
    }
    let warm = samples.filter { $0.0 >= Double(warmUp) }
    let first = warm.first?.1 ?? 0, last = warm.last?.1 ?? 0
    print(String(format: "posted %d (%d refused); RSS after the %d s warm-up %.1f → %.1f MB: %+.0f KiB/min (least-squares over %d samples; target ≤ 100); threads %d–%d",
                 sent, errors, warmUp, first / 1024, last / 1024, slopePerMinute(warm), warm.count,
                 threadCounts.min() ?? 0, threadCounts.max() ?? 0))
    try? System.sendSignal(SIGTERM, to: host.processIdentifier)
    host.waitUntilExit()
}
