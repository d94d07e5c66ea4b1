import EventBusKit
import EventSources
import Foundation
import Synchronization
import SystemdBus
import SystemCalls

// D-Bus benchmark: `eventbus-bench dbus [signals]`, against a private dbus-daemon this process
// starts (and stops by its pid), so nothing else on the bus competes.
//
// The source runs in this process (DBusDriver, one connection, its `eventbus.dbus` thread), its
// watch taking `interface=org.eventbus.Bench`. The anchor is `busctl monitor` on the same bus,
// in the same run, with the same match.
//
// - Latency: N signals (default 1 000), one every 2 ms, each carrying its send time
//   (CLOCK_REALTIME µs, taken just before sd_bus_send) as `arg1`. Each side's latency is from
//   that time: busctl's to the kernel receive time sd-bus stamps on the message (so it excludes
//   busctl's own parsing and printing), ours to the time the subscriber's closure runs (so it
//   includes reading, matching, flattening and posting). p50, p99, max; missed (0 expected).
// - Idle: this process's CPU time over 10 s with the source subscribed and nothing sent
//   (0 expected: the thread waits in poll(2) without a timeout).
enum DBusBenchmark {
    private struct Arrival: Sendable {
        var number: Int64
        var sentMicroseconds: Int64
        var arrivedMicroseconds: Int64
    }

    static func run(signals: Int) {
        let folder = NSTemporaryDirectory() + "eventbus-bench-dbus-\(getpid())"
        try? FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let address = "unix:path=\(folder)/bus"
        let daemon = Process()
        daemon.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        daemon.arguments = ["--session", "--nofork", "--address=\(address)", "--print-address"]
        let printed = Pipe()
        daemon.standardOutput = printed
        daemon.standardError = FileHandle.nullDevice
        guard (try? daemon.run()) != nil, !printed.fileHandleForReading.readData(ofLength: 1).isEmpty else {
            print("dbus: cannot start /usr/bin/dbus-daemon")
            exit(1)
        }
        defer {
            try? System.sendSignal(SIGTERM, to: daemon.processIdentifier)
            daemon.waitUntilExit()
        }
        print("dbus: a private \((try? String(contentsOfFile: "/proc/\(daemon.processIdentifier)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "dbus-daemon") at \(address)")

        let monitorLog = folder + "/busctl.jsonl"
        _ = FileManager.default.createFile(atPath: monitorLog, contents: nil)
        let monitor = Process()
        monitor.executableURL = URL(fileURLWithPath: "/usr/bin/busctl")
        monitor.arguments = ["--address=\(address)", "monitor", "--json=short", "--match", "type='signal',interface='org.eventbus.Bench'"]
        monitor.standardOutput = FileHandle(forWritingAtPath: monitorLog)
        monitor.standardError = FileHandle.nullDevice
        guard (try? monitor.run()) != nil else {
            print("dbus: cannot start busctl monitor")
            exit(1)
        }
        defer {
            try? System.sendSignal(SIGTERM, to: monitor.processIdentifier)
            monitor.waitUntilExit()
        }

        let bus = Bus()
        DBusDriver.register(on: bus)
        let arrivals = Mutex<[Arrival]>([])
        let probes = Atomic<Int>(0)
        let watch = DBusWatch(bus: .address(address), match: DBusMatch(interface: "org.eventbus.Bench"))
        let subscription = try! bus.dbus(watch).sink { event in
            let now = realtimeMicroseconds()
            guard let signal = event.dbusSignal else { return }
            if signal.member == "Probe" {
                probes.add(1, ordering: .relaxed)
                return
            }
            guard let number = signal.arguments["arg0"]?.intValue, let sent = signal.arguments["arg1"]?.intValue else { return }
            arrivals.withLock { $0.append(Arrival(number: number, sentMicroseconds: sent, arrivedMicroseconds: now)) }
        }
        defer { subscription.cancel() }

        let emitter: SDBus
        do {
            emitter = try SDBus.connect(address: address, busClient: true)
        } catch {
            print("dbus: cannot connect the emitter: \(error)")
            exit(1)
        }
        func emit(_ member: String, _ number: Int64 = 0) {
            do {
                try emitter.emitSignal(path: "/org/eventbus/Bench", interface: "org.eventbus.Bench", member: member) { (writer) throws(SDBusError) in
                    try writer.uint64(UInt64(number))
                    try writer.uint64(UInt64(realtimeMicroseconds()))
                }
            } catch {
                print("dbus: cannot send: \(error)")
                exit(1)
            }
        }
        // The source's rule is added asynchronously, busctl's too: probe until both see it.
        var ready = false
        for _ in 0..<500 where !ready {
            emit("Probe")
            System.sleep(for: .microseconds(10_000))
            let monitored = (try? String(contentsOfFile: monitorLog, encoding: .utf8))?.contains("\"Probe\"") ?? false
            ready = probes.load(ordering: .relaxed) > 0 && monitored
        }
        guard ready else {
            print("dbus: the source or busctl never saw a probe (source: \(probes.load(ordering: .relaxed)))")
            exit(1)
        }

        // Idle: subscribed, nothing sent.
        sleep(1)
        let before = processCPUSeconds()
        sleep(10)
        let idle = processCPUSeconds() - before
        print(String(format: "  idle, subscribed: %.1f ms CPU in 10 s (%.3f%% of a core)", idle * 1000, idle / 10 * 100))

        // Latency: paced signals.
        for number in 0..<signals {
            emit("Signal", Int64(number))
            System.sleep(for: .microseconds(2_000))
        }
        let deadline = Date(timeIntervalSinceNow: 30)
        while arrivals.withLock({ $0.count }) < signals && Date() < deadline { System.sleep(for: .microseconds(10_000)) }
        System.sleep(for: .microseconds(500_000))
        let ours = arrivals.withLock { $0 }
        let theirs = busctlSignals((try? String(contentsOfFile: monitorLog, encoding: .utf8)) ?? "")
        let inOrder = ours.map(\.number) == (0..<Int64(signals)).map { $0 }
        print("  \(signals) signals, one every 2 ms; ms from send (CLOCK_REALTIME in the signal) to:")
        let rows = [("busctl monitor (kernel receive stamp)", theirs.map { Double($0.received - $0.sent) / 1000 }),
                    ("dbus source → subscriber closure", ours.map { Double($0.arrivedMicroseconds - $0.sentMicroseconds) / 1000 })]
        var medians: [Double] = []
        var p99s: [Double] = []
        for (label, values) in rows {
            let sorted = values.sorted()
            guard !sorted.isEmpty else {
                print("    \(label): nothing measured")
                continue
            }
            let median = sorted[sorted.count / 2]
            let p99 = sorted[min(sorted.count - 1, sorted.count * 99 / 100)]
            medians.append(median)
            p99s.append(p99)
            print("    \(label.padding(toLength: 40, withPad: " ", startingAt: 0)) "
                  + String(format: "p50 %6.3f  p99 %6.3f  max %7.3f  (n=%d)", median, p99, sorted.last!, sorted.count))
        }
        if medians.count == 2, medians[0] > 0, p99s[0] > 0 {
            print(String(format: "    source / busctl: p50 %.2f× (%+.3f ms), p99 %.2f× (%+.3f ms)",
                         medians[1] / medians[0], medians[1] - medians[0], p99s[1] / p99s[0], p99s[1] - p99s[0]))
        }
        print("    source: \(ours.count) of \(signals) arrived, \(inOrder ? "each once, in order" : "NOT each once in order"); busctl saw \(theirs.count)")
    }

    /// busctl's JSON lines of the benchmark's `Signal`s: the send time they carry and the
    /// kernel receive time.
    private static func busctlSignals(_ text: String) -> [(sent: Int64, received: Int64)] {
        text.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  object["member"] as? String == "Signal", let payload = object["payload"] as? [String: Any],
                  let data = payload["data"] as? [Any], data.count == 2, let sent = (data[1] as? NSNumber)?.int64Value,
                  let received = (object["timestamp-realtime"] as? NSNumber)?.int64Value else { return nil }
            return (sent, received)
        }
    }

    private static func realtimeMicroseconds() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000
    }

    private static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }
}
