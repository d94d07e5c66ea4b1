import EventBusKit
import EventSources
import Foundation
import Synchronization
import SystemCalls

// Journal benchmark (docs/platform-facts.md, The journal), everything measured in the same run:
// - ingest: N entries (default 1M) in journal files written by systemd-journal-remote from
//   Journal Export Format, read from the head by the bus's journal source into a sink, side by
//   side with a C loop (`sd_journal_next` + `MESSAGE`, compiled with gcc here), `journalctl -o cat`
//   and `journalctl -o json`. Best of 3 after a warm-up pass, entries per second.
// - follow latency: a private journald (as in the tests); a child process (`eventbus-bench
//   journal-writer`) sends entries with its CLOCK_MONOTONIC send time in MESSAGE; the sink
//   records receive time minus send time. p50/p99/max.
// Targets: ingest ≥ 0.5× the C loop and ≥ 5× journalctl -o json; follow p99 ≤ 10 ms.

enum JournalBenchmark {
    /// Shared with the sink on the reader thread.
    final class Count: @unchecked Sendable {
        let value = Atomic<Int>(0)
        let done = DispatchSemaphore(value: 0)
    }

    static func run(entries: Int) {
        let work = NSTemporaryDirectory() + "/eventbus-journal-bench-\(getpid())"
        try? FileManager.default.removeItem(atPath: work)
        try! FileManager.default.createDirectory(atPath: work + "/files", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: work) }

        print("journal benchmark: \(entries) entries")
        let start = Date()
        writeJournalFiles(count: entries, into: work + "/files")
        print(String(format: "  wrote the journal files with systemd-journal-remote in %.1f s", Date().timeIntervalSince(start)))
        let cLoop = compileCLoop(in: work)

        var results: [(String, Double)] = []
        func best(_ name: String, _ body: () -> Double) {
            _ = body()  // warm-up: page cache, libsystemd's mmap windows
            let rate = (0..<3).map { _ in body() }.max()!
            results.append((name, rate))
            print("  " + name.padding(toLength: 48, withPad: " ", startingAt: 0) + String(format: "%10.0f entries/s", rate))
        }
        best("C loop (sd_journal_next + MESSAGE)") { runCLoop(cLoop, directory: work + "/files", expect: entries) }
        // What every entry of the source costs at least, in C: its cursor (for acknowledgement
        // and resume) is one sd_journal_get_cursor, an asprintf inside libsystemd.
        best("C loop + sd_journal_get_cursor") {
            runCLoop(cLoop, directory: work + "/files", expect: entries, cursor: true)
        }
        best("bus journal source (standard fields)") { source(directory: work + "/files", fields: .standard, expect: entries) }
        best("bus journal source (all fields)") { source(directory: work + "/files", fields: .everything, expect: entries) }
        best("journalctl -o cat") { journalctl(["-o", "cat"], directory: work + "/files", expect: entries) }
        best("journalctl -o json") { journalctl(["-o", "json"], directory: work + "/files", expect: entries) }
        let rate = Dictionary(uniqueKeysWithValues: results)
        let ours = rate["bus journal source (standard fields)"]!
        print(String(format: "  source / C loop = %.2f× (target ≥ 0.5×); source / C loop with cursors = %.2f×; "
                         + "source / journalctl -o json = %.1f× (target ≥ 5×)",
                     ours / rate["C loop (sd_journal_next + MESSAGE)"]!, ours / rate["C loop + sd_journal_get_cursor"]!,
                     ours / rate["journalctl -o json"]!))

        followLatency(work: work, count: 3000)
    }

    // MARK: Ingest

    /// Entries shaped like real ones (about a dozen fields; most values repeat, as in a real
    /// journal where they are stored once), written by systemd-journal-remote from stdin.
    static func writeJournalFiles(count: Int, into directory: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/lib/systemd/systemd-journal-remote")
        process.arguments = ["-o", directory + "/bench.journal", "-"]
        let input = Pipe()
        process.standardInput = input
        process.standardError = FileHandle.nullDevice
        try! process.run()
        let base = UInt64(Date().timeIntervalSince1970 * 1e6) - UInt64(count)
        var chunk = ""
        chunk.reserveCapacity(1 << 20)
        for index in 0..<count {
            let unit = ["nginx", "sshd", "cron", "postgres"][index % 4]
            chunk += """
                __REALTIME_TIMESTAMP=\(base + UInt64(index))
                __MONOTONIC_TIMESTAMP=\(1_000_000 + index)
                _BOOT_ID=0123456789abcdef0123456789abcdef
                _MACHINE_ID=fedcba9876543210fedcba9876543210
                _HOSTNAME=bench
                _TRANSPORT=journal
                _UID=33
                _GID=33
                _PID=\(1000 + index % 7)
                _COMM=\(unit)
                _EXE=/usr/sbin/\(unit)
                _SYSTEMD_UNIT=\(unit).service
                SYSLOG_IDENTIFIER=\(unit)
                PRIORITY=\(index % 8)
                MESSAGE=request \(index) served in \(index % 97) ms for 10.0.\(index % 256).\(index % 199)


                """
            if chunk.utf8.count > 1 << 20 {
                input.fileHandleForWriting.write(Data(chunk.utf8))
                chunk.removeAll(keepingCapacity: true)
            }
        }
        input.fileHandleForWriting.write(Data(chunk.utf8))
        try! input.fileHandleForWriting.close()
        process.waitUntilExit()
        precondition(process.terminationStatus == 0, "systemd-journal-remote failed")
    }

    /// The anchor: the tightest C reader — next, MESSAGE, nothing else. Built here with gcc so it
    /// is real C against the same libsystemd.
    static func compileCLoop(in work: String) -> String {
        let source = """
            #include <systemd/sd-journal.h>
            #include <stdio.h>
            #include <stdlib.h>
            #include <time.h>
            int main(int argc, char **argv) {
                struct timespec a, b;
                clock_gettime(CLOCK_MONOTONIC, &a);
                sd_journal *j;
                if (sd_journal_open_directory(&j, argv[1], 0) < 0) return 1;
                int cursors = argc > 2;
                long n = 0, bytes = 0;
                const void *d; size_t l;
                SD_JOURNAL_FOREACH(j) {
                    if (sd_journal_get_data(j, "MESSAGE", &d, &l) >= 0) { n++; bytes += l; }
                    if (cursors) {
                        char *c;
                        if (sd_journal_get_cursor(j, &c) >= 0) { bytes += c[0]; free(c); }
                    }
                }
                sd_journal_close(j);
                clock_gettime(CLOCK_MONOTONIC, &b);
                printf("%ld %ld %ld\\n", n, bytes, (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec));
                return 0;
            }
            """
        try! source.write(toFile: work + "/cloop.c", atomically: true, encoding: .utf8)
        let status = runProcess("/usr/bin/gcc", ["-O2", "-o", work + "/cloop", work + "/cloop.c", "-lsystemd"]).status
        precondition(status == 0, "gcc failed")
        return work + "/cloop"
    }

    static func runCLoop(_ program: String, directory: String, expect: Int, cursor: Bool = false) -> Double {
        let output = runProcess(program, [directory] + (cursor ? ["cursor"] : [])).output.split(separator: " ")
        precondition(Int(output[0]) == expect, "the C loop read \(output[0]) entries")
        return Double(expect) / (Double(output[2].trimmingCharacters(in: .whitespacesAndNewlines))! / 1e9)
    }

    /// The bus's journal source from the head into a counting sink (on the reader thread), from
    /// subscribing to the last entry.
    static func source(directory: String, fields: JournalFields, expect: Int) -> Double {
        let bus = Bus()
        JournalDriver.register(on: bus, stateDirectory: NSTemporaryDirectory())
        let count = Count()
        let start = MonotonicClock.now()
        let subscription = try! bus.journal(from: .directory(directory), start: .head, fields: fields).sink { event in
            guard event.name == JournalEntry.eventName else { return }
            if count.value.add(1, ordering: .relaxed).newValue == expect { count.done.signal() }
        }
        count.done.wait()
        let elapsed = MonotonicClock.now() - start
        subscription.cancel()
        return Double(expect) / (Double(elapsed) / 1e9)
    }

    static func journalctl(_ format: [String], directory: String, expect: Int) -> Double {
        let start = MonotonicClock.now()
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/journalctl")
        process.arguments = ["-D", directory, "--no-pager", "-q"] + format
        process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        try! process.run()
        process.waitUntilExit()
        return Double(expect) / (Double(MonotonicClock.now() - start) / 1e9)
    }

    static func runProcess(_ path: String, _ arguments: [String]) -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        try! process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    // MARK: Follow latency

    /// A private journald (docs/platform-facts.md, The journal), the source following its files from the tail, and a
    /// writer child process stamping each entry with its send time.
    static func followLatency(work: String, count: Int) {
        let root = work + "/journald"
        for folder in ["run/journal", "run/journald.conf.d", "log"] {
            try! FileManager.default.createDirectory(atPath: root + "/" + folder, withIntermediateDirectories: true)
        }
        precondition(FileManager.default.createFile(atPath: root + "/run/journal/flushed", contents: nil))
        precondition(FileManager.default.createFile(atPath: root + "/run/journald.conf.d/bench.conf", contents: Data("""
            [Journal]
            Storage=persistent
            RateLimitIntervalSec=0
            ReadKMSG=no
            ForwardToSyslog=no
            ForwardToWall=no
            """.utf8)))
        let journald = Process()
        journald.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        journald.arguments = ["--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                              "mount --bind \(root)/run /run/systemd && mount --bind \(root)/log /var/log/journal"
                                  + " && exec /lib/systemd/systemd-journald"]
        journald.standardError = FileHandle.nullDevice
        try! journald.run()
        defer {
            try? System.sendSignal(SIGTERM, to: journald.processIdentifier)
            journald.waitUntilExit()
        }
        while !System.isAccessible(root + "/run/journal/socket") { System.sleep(for: .microseconds(1000)) }

        let bus = Bus()
        JournalDriver.register(on: bus, stateDirectory: work)
        let lock = NSLock()
        var latencies: [UInt64] = []
        latencies.reserveCapacity(count)
        let following = DispatchSemaphore(value: 0)
        let done = DispatchSemaphore(value: 0)
        let subscription = try! bus.journal(matching: .identifier("latency"), from: .directory(root + "/log")).sink { event in
            if event.journalStatus?.state == .following { following.signal() }
            guard let message = event.journalEntry?.message, let sent = UInt64(message.dropFirst(4)) else { return }
            let now = MonotonicClock.now()
            let finished = lock.withLock {
                latencies.append(now - sent)
                return latencies.count == count
            }
            if finished { done.signal() }
        }
        following.wait()
        let writer = Process()
        writer.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        writer.arguments = ["journal-writer", root + "/run/journal/socket", String(count)]
        try! writer.run()
        writer.waitUntilExit()
        if done.wait(timeout: .now() + 30) == .timedOut { print("  follow latency: entries missing") }
        subscription.cancel()
        let sorted = lock.withLock { latencies.sorted() }
        func ms(_ p: Double) -> Double { Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1e6 }
        print(String(format: "  follow latency send → subscriber (%d entries, one per ms): p50 %.2f ms, p99 %.2f ms, max %.2f ms (target p99 ≤ 10 ms)",
                     sorted.count, ms(0.5), ms(0.99), Double(sorted.last ?? 0) / 1e6))
    }

    /// The latency writer (a child process, so it does not share the reader's CPU share): one
    /// native-protocol datagram per millisecond, `MESSAGE=lat <CLOCK_MONOTONIC ns at send>`.
    static func writer(socket path: String, count: Int) {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        for _ in 0..<count {
            let bytes = Array("SYSLOG_IDENTIFIER=latency\nMESSAGE=lat \(MonotonicClock.now())\n".utf8)
            _ = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddr in
                    bytes.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, 0, sockaddr, socklen_t(MemoryLayout<sockaddr_un>.size)) }
                }
            }
            System.sleep(for: .microseconds(1000))
        }
        close(fd)
    }
}
