import EventBusKit
import EventSources
import Foundation
import Synchronization
import SystemCalls

// Units benchmark, against the systemd of a running container (docs/benchmarks.md says how to
// boot one from the production tests' root): `eventbus-bench units PID`, PID being the
// container's systemd as seen from here.
//
// The source runs in this process, connected to the container's system bus (dbus-daemon) as
// `manager: unix:path=/proc/PID/root/run/dbus/system_bus_socket` — its systemd refuses its
// private socket to peers outside the container. The anchor is `busctl monitor` on the same
// bus, in the same run, watching the same signals.
//
// - Latency: `systemctl start` and `stop` of a unit (ExecStartPre=/bin/true, so that a start
//   and a restart go through activating), 200 times each in turn, then `systemctl restart` of
//   it 200 times: every transition each command causes, p50 and p99. Each side's
//   latency is measured from the moment systemd changed the state (the signal's own
//   StateChangeTimestamp, CLOCK_REALTIME of the same kernel): busctl's is the kernel receive
//   time sd-bus stamps on the message (so it excludes busctl's own processing), ours the time
//   the subscriber's closure runs. A stop or restart queues a job whose events come with the
//   transitions: this is where a transition waiting on the job's type would show.
// - Burst: `systemctl restart` of 200 units in one command: transitions per second as they
//   arrive, and the missed ones (each unit's transitions against busctl's signals with repeats
//   taken out; 0 expected).
// - Idle: this process's CPU time over 10 s with 500 units loaded and the connection open
//   (0 expected: nothing polls).
enum UnitsBenchmark {
    private final class Recorder: Sendable {
        let arrivals = Mutex<[Arrival]>([])
        let synced = Atomic<Int>(0)
        var all: [Arrival] { arrivals.withLock { $0 } }
    }

    private struct Arrival: Sendable {
        var unit: String
        var state: String
        var old: String?
        var changedMicroseconds: UInt64?
        var arrivedMicroseconds: UInt64
    }

    static func run(containerPID: Int32) {
        guard (try? String(contentsOfFile: "/proc/\(containerPID)/comm", encoding: .utf8))?.hasPrefix("systemd") == true,
              let theirs = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(containerPID)/ns/mnt"),
              let ours = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/mnt"), theirs != ours else {
            print("units: pid \(containerPID) is not a container's systemd (its comm must be systemd, its mount namespace not ours)")
            exit(2)
        }
        let root = "/proc/\(containerPID)/root"
        // In a session of its own, as an operator's systemctl is: under load, the scheduler
        // shares the CPUs between sessions (autogroups), and commands run in this process's
        // session would take their time from the source, not from busctl in its own.
        func container(_ script: String) -> String {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/nsenter")
            process.arguments = ["--target", String(containerPID), "--all", "--root", "--wd", "/usr/bin/env", "-i",
                                 "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "/usr/bin/setsid", "--wait", "/bin/sh", "-c", script]
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = pipe
            try! process.run()
            let output = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return String(decoding: output, as: UTF8.self)
        }

        // A container just booted: its private socket and bus come up with it.
        for _ in 0..<300 {
            let state = container("systemctl is-system-running --wait 2>/dev/null").trimmingCharacters(in: .whitespacesAndNewlines)
            if state == "running" || state == "degraded" { break }
            System.sleep(for: .microseconds(100_000))
        }
        print("units: the container's systemd \(container("systemctl --version | head -1").trimmingCharacters(in: .whitespacesAndNewlines))")
        _ = container("""
            mkdir -p /run/systemd/system
            for i in $(seq 1 500); do printf '[Service]\\nExecStart=/bin/sleep infinity\\n' > /run/systemd/system/ebbench-$i.service; done
            printf '[Service]\\nExecStartPre=/bin/true\\nExecStart=/bin/sleep infinity\\n' > /run/systemd/system/ebbench-lat.service
            systemctl daemon-reload
            systemctl start $(seq -f 'ebbench-%g.service' 1 500)
            systemctl stop bench-busctl 2>/dev/null; rm -f /tmp/bench-busctl.jsonl
            systemd-run -q --unit=bench-busctl sh -c "exec busctl monitor --json=short --match \\"type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='/org/freedesktop/systemd1/unit'\\" > /tmp/bench-busctl.jsonl"
            """)

        let bus = Bus()
        UnitsDriver.register(on: bus)
        // Through the container's system bus only: its systemd refuses connections to its
        // private socket from outside the container ("Broken pipe", busctl's as well).
        let variants = [("system bus", "unix:path=\(root)/run/dbus/system_bus_socket")]
        let recorders = variants.map { _ in Recorder() }
        var subscriptions: [AnyCancellable] = []
        for (index, variant) in variants.enumerated() {
            let watch = UnitWatch(match: .names("ebbench-*"), manager: .address(variant.1))
            let recorder = recorders[index]
            subscriptions.append(try! bus.units(watch).sink { event in
                let now = UInt64(Date().timeIntervalSince1970 * 1e6)
                if event.unitsSynced != nil { recorder.synced.add(1, ordering: .relaxed) }
                if let gap = event.unitsGap { print("  \(variant.0): units.gap: \(gap.reason)") }
                guard let change = event.unitState, change.origin == .change else { return }
                recorder.arrivals.withLock {
                    $0.append(Arrival(unit: change.unit, state: "\(change.new.activeState)/\(change.new.subState)",
                                      old: change.old.map { "\($0.activeState)/\($0.subState)" },
                                      changedMicroseconds: change.changedAtMicroseconds, arrivedMicroseconds: now))
                }
            })
        }
        func waitFor(_ seconds: Double, _ condition: () -> Bool) -> Bool {
            let deadline = Date(timeIntervalSinceNow: seconds)
            while Date() < deadline {
                if condition() { return true }
                System.sleep(for: .microseconds(10_000))
            }
            return condition()
        }
        guard waitFor(60, { recorders.allSatisfy { $0.synced.load(ordering: .relaxed) > 0 } }) else {
            print("units: no snapshot from the container's systemd within 60 s")
            exit(1)
        }
        // busctl has no ready signal; its match is in place well within this.
        sleep(1)

        // Idle: 500 units loaded, both connections subscribed.
        let before = processCPUSeconds()
        sleep(10)
        let idle = processCPUSeconds() - before
        print(String(format: "  idle, 500 units loaded, subscribed: %.1f ms CPU in 10 s (%.3f%% of a core)", idle * 1000, idle / 10 * 100))

        // Latency of each command's transitions. The unit is stopped before and after each round
        // of commands; a start counts the states it leads into (activating, active), a stop its
        // own (deactivating, inactive), a restart all of them.
        let rounds: [(script: String, rows: [(command: String, leadsInto: [String]?)])] = [
            ("for i in $(seq 200); do systemctl start ebbench-lat.service; systemctl stop ebbench-lat.service; done",
             [("start", ["activating", "active"]), ("stop", ["deactivating", "inactive"])]),
            ("systemctl start ebbench-lat.service; for i in $(seq 200); do systemctl restart ebbench-lat.service; done; systemctl stop ebbench-lat.service",
             [("restart", nil)]),
        ]
        print("  one unit's transitions, ms after systemd's StateChangeTimestamp, p50 / p99 (200 commands each):")
        for round in rounds {
            let from = UInt64(Date().timeIntervalSince1970 * 1e6)
            _ = container(round.script)
            let to = UInt64(Date().timeIntervalSince1970 * 1e6)
            // busctl has no flush to wait for: its last signals are written well within this.
            sleep(1)
            // systemd's first signal of each transition: a state other than the one before (it
            // repeats a state in later signals, and a restart within one turn of its loop is one
            // signal of the same state), as the source reports them.
            var busctlFirst: [String: UInt64] = [:]
            var last = ""
            for signal in busctlSignals(container("cat /tmp/bench-busctl.jsonl")) where signal.unit == "ebbench-lat.service" {
                defer { last = signal.state }
                guard signal.state != last, let changed = signal.changedMicroseconds, changed >= from, changed <= to else { continue }
                busctlFirst["\(changed) \(signal.state)"] = signal.receivedMicroseconds
            }
            for (index, variant) in variants.enumerated() {
                func arrived() -> [String: UInt64] {
                    var arrivals: [String: UInt64] = [:]
                    for arrival in recorders[index].all where arrival.unit == "ebbench-lat.service" {
                        if let changed = arrival.changedMicroseconds { arrivals["\(changed) \(arrival.state)"] = arrival.arrivedMicroseconds }
                    }
                    return arrivals
                }
                _ = waitFor(30) { let seen = arrived(); return busctlFirst.keys.allSatisfy { seen[$0] != nil } }
                let seen = arrived()
                for row in round.rows {
                    var ours: [Double] = []
                    var theirs: [Double] = []
                    for (key, received) in busctlFirst {
                        let parts = key.split(separator: " ")
                        let active = parts[1].split(separator: "/")[0]
                        guard row.leadsInto?.contains(String(active)) ?? true, let changed = Int64(parts[0]) else { continue }
                        theirs.append(Double(Int64(received) - changed) / 1000)
                        if let arrival = seen[key] { ours.append(Double(Int64(arrival) - changed) / 1000) }
                    }
                    let busctl = percentiles(theirs)
                    let source = percentiles(ours)
                    let figures = String(format: "busctl monitor %6.2f / %6.2f   units source %6.2f / %6.2f   (%+.2f / %+.2f)",
                                         busctl.p50, busctl.p99, source.p50, source.p99, source.p50 - busctl.p50, source.p99 - busctl.p99)
                    let missed = theirs.count - ours.count
                    print("    \(row.command.padding(toLength: 8, withPad: " ", startingAt: 0)) \(String(theirs.count).leftPadded(4)) transitions  \(figures)"
                          + (missed > 0 ? "  \(missed) not seen by the source (\(variant.0))" : ""))
                }
            }
        }

        // Burst: 200 restarts in one command.
        let firstBurst = recorders.map { $0.all.count }
        let burstUnits = (1...200).map { "ebbench-\($0).service" }
        let started = Date()
        _ = container("systemctl restart $(seq -f 'ebbench-%g.service' 1 200)")
        let commandSeconds = Date().timeIntervalSince(started)
        let done = waitFor(60) {
            recorders.enumerated().allSatisfy { index, recorder in
                let burst = recorder.all.dropFirst(firstBurst[index])
                let running = Set(burst.filter { $0.state == "active/running" }.map { $0.unit })
                return burstUnits.allSatisfy(running.contains)
            }
        }
        sleep(1)
        let allSignals = busctlSignals(container("cat /tmp/bench-busctl.jsonl"))
        print(String(format: "  burst: systemctl restart of 200 units took %.2f s", commandSeconds) + (done ? "" : " (not every unit came back within 60 s)"))
        for (index, variant) in variants.enumerated() {
            let burst = Array(recorders[index].all.dropFirst(firstBurst[index]))
            let seconds = Double((burst.last?.arrivedMicroseconds ?? 0) - (burst.first?.arrivedMicroseconds ?? 0)) / 1e6
            var missed = 0
            var extra = 0
            for unit in burstUnits {
                let expected = dedup(allSignals.filter { $0.unit == unit }.map(\.state), from: "active/running")
                let seen = recorders[index].all.filter { $0.unit == unit }.map { $0.state }
                missed += max(0, expected.count - seen.count)
                extra += max(0, seen.count - expected.count)
                if seen != expected && missed + extra <= 3 { print("    \(variant.0) \(unit): seen \(seen), busctl \(expected)") }
            }
            let rate = seconds > 0 ? Double(burst.count) / seconds : 0
            let figures = String(format: "%5d transitions in %.3f s: %8.0f/s; missed %d, extra %d (against busctl)",
                                 burst.count, seconds, rate, missed, extra)
            print("    units source, \(variant.0.padding(toLength: 16, withPad: " ", startingAt: 0)) \(figures)")
        }

        subscriptions.forEach { $0.cancel() }
        _ = container("systemctl stop bench-busctl; systemctl stop $(seq -f 'ebbench-%g.service' 1 500) ebbench-lat.service")
    }

    private struct Signal {
        var unit: String
        var state: String
        var changedMicroseconds: UInt64?
        var receivedMicroseconds: UInt64
    }

    /// busctl's JSON lines: the Unit interface's signals with their state, systemd's timestamp and
    /// the receive time.
    private static func busctlSignals(_ text: String) -> [Signal] {
        text.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let path = object["path"] as? String, let payload = object["payload"] as? [String: Any],
                  let data = payload["data"] as? [Any], data.first as? String == "org.freedesktop.systemd1.Unit",
                  let properties = data.dropFirst().first as? [String: Any],
                  let active = (properties["ActiveState"] as? [String: Any])?["data"] as? String,
                  let sub = (properties["SubState"] as? [String: Any])?["data"] as? String,
                  let received = (object["timestamp-realtime"] as? NSNumber)?.uint64Value,
                  let prefix = path.range(of: "/org/freedesktop/systemd1/unit/") else { return nil }
            let label = String(path[prefix.upperBound...]).replacingOccurrences(of: "_2d", with: "-").replacingOccurrences(of: "_2e", with: ".")
            let changed = ((properties["StateChangeTimestamp"] as? [String: Any])?["data"] as? NSNumber)?.uint64Value
            return Signal(unit: label, state: "\(active)/\(sub)", changedMicroseconds: changed, receivedMicroseconds: received)
        }
    }

    /// p50 and p99 (the value 99 % of the samples do not exceed), nan for none.
    private static func percentiles(_ values: [Double]) -> (p50: Double, p99: Double) {
        let sorted = values.sorted()
        guard !sorted.isEmpty else { return (.nan, .nan) }
        return (sorted[sorted.count / 2], sorted[max(0, Int((Double(sorted.count) * 0.99).rounded(.up)) - 1)])
    }

    private static func dedup(_ states: [String], from start: String) -> [String] {
        var last = start
        var result: [String] = []
        for state in states where state != last {
            result.append(state)
            last = state
        }
        return result
    }

    private static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
        return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    }
}
