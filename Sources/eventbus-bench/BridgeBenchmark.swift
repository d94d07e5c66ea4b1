import CNATS
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import NATSBridge
import SystemCalls

// Bridge benchmark: host A's bus → bridge → nats-server → bridge → host B's bus, side by side
// with the raw anchor — a plain nats.c publisher and subscriber, called directly through CNATS,
// sending payloads of the same size through the same server in the same run.
//
// - Throughput: N events posted on A as fast as possible; timed from the first post to the last
//   event on B (core NATS; the subscription's pending limit is raised so nothing is dropped —
//   a run that loses events says so). The core bridge and the raw anchor take turns for three
//   rounds; each side's median round is reported.
// - Latency: events paced at 10 000/s for 2 s; each carries its CLOCK_MONOTONIC post time, B's
//   subscriber takes the difference (same machine, same clock).
// Both buses run in this process (two `Bus`es, two bridges, two connections), so the numbers
// are the bridge's own cost, not a control socket's.

/// What one side of the comparison measured.
private struct BridgeRun {
    var received = 0
    var seconds = 0.0
    var latencies: [UInt64] = []
    /// CPU used meanwhile by this process and the nats-server (``CPUTime``).
    var cpuSeconds = 0.0
    /// The same per event, by thread (``CPUShares``; throughput rounds).
    var cpuShares = ""

    var perSecond: Double { Double(received) / seconds }
    var cpuMicrosecondsPerEvent: Double { cpuSeconds / Double(max(received, 1)) * 1e6 }
    func percentile(_ p: Double) -> Double {
        guard !latencies.isEmpty else { return .nan }
        let sorted = latencies.sorted()
        return Double(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]) / 1e6
    }
}

/// CPU seconds used so far by this process and the nats-server. On a machine shared with other
/// work, events/s move with the others' load; the CPU an event costs moves much less, so the
/// benchmark prints both.
private enum CPUTime {
    nonisolated(unsafe) static var serverPID: pid_t = 0

    static func serverSeconds() -> Double { server() }

    static func now() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        let own = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
        return own + server()
    }

    /// utime + stime of /proc/<pid>/stat (fields 14 and 15, in clock ticks).
    private static func server() -> Double {
        guard serverPID > 0, let stat = try? String(contentsOfFile: "/proc/\(serverPID)/stat", encoding: .utf8),
              let end = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: end)...].split(separator: " ")
        guard fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

/// Where one throughput round's CPU went, per event: the posting thread, the bridge's named
/// threads (`eventbus.export`, `eventbus.import`), nats.c's own threads, and the nats-server —
/// so a change to the ratio can be put down to the thread that moved.
private struct CPUShares {
    private let threads = ThreadTimes.now()
    private let server = CPUTime.serverSeconds()
    private let postingThread = ThreadTimes.currentThreadID()

    func line(events: Int) -> String {
        var seconds: [String: Double] = [:]
        for (thread, spent) in ThreadTimes.now().since(threads) {
            let role = thread == postingThread ? "posting" : spent.name.hasPrefix("eventbus.") ? spent.name : "nats.c"
            seconds[role, default: 0] += spent.seconds
        }
        seconds["nats-server"] = CPUTime.serverSeconds() - server
        let order = ["posting", "eventbus.export", "nats.c", "eventbus.import", "nats-server"]
        return order.compactMap { role in
            let perEvent = (seconds[role] ?? 0) / Double(max(events, 1)) * 1e6
            return perEvent >= 0.005 ? String(format: "%@ %.2f", role, perEvent) : nil
        }.joined(separator: ", ")
    }
}

/// Counts arrivals and records latencies, from whichever thread delivers.
private final class Arrivals: @unchecked Sendable {
    private let lock = NSLock()
    private var count = 0
    private var latencies: [UInt64] = []
    private var last: UInt64 = 0

    func arrived(sentAt: UInt64, now: UInt64) {
        lock.lock()
        count += 1
        latencies.append(now &- sentAt)
        last = now
        lock.unlock()
    }

    /// Without the latencies: a copy of the array held while arrivals go on would make the next
    /// `arrived` copy all of it (copy-on-write) — every poll of ``finish`` would cost the
    /// delivering thread a copy of up to 4 MB.
    var progress: (count: Int, last: UInt64) { lock.withLock { (count, last) } }
    var recorded: [UInt64] { lock.withLock { latencies } }
    func reset() { lock.withLock { count = 0; latencies.removeAll(keepingCapacity: true) } }
}

enum BridgeBenchmark {
    /// What a run measures: everything, or one part to profile.
    enum Part: String {
        case all, core, durable
    }

    static func run(events: Int, part: Part = .all) {
        guard let server = try? BenchNATSServer() else {
            print("bridge benchmark: cannot start nats-server (apt-get install nats-server)")
            exit(1)
        }
        defer { server.stop() }
        CPUTime.serverPID = server.pid
        print("Bridge benchmark: \(events) events, core NATS on loopback (\(server.url)); payload ~60 bytes")
        if part == .durable {
            // Only the durable bridge, to profile it (the nats-server's CPU then is its alone).
            let (durableThroughput, durablePaced, _) = bridged(server.url, count: events, durable: true)
            print("                                   throughput  CPU/event  p50 @10k/s  p99 @10k/s  p99.9")
            print(row("bridge A → JetStream → B (durable)", durableThroughput, durablePaced, sent: events))
            return
        }
        let rawPaced = raw(server.url, count: 20_000, ratePerSecond: 10_000)
        let (bridgeThroughput, bridgePaced, anchor) = bridged(server.url, count: events, durable: false) {
            raw(server.url, count: events, ratePerSecond: nil)
        }
        let rawThroughput = anchor!
        print("                                   throughput  CPU/event  p50 @10k/s  p99 @10k/s  p99.9")
        print(row("raw nats.c publish → subscribe", rawThroughput, rawPaced, sent: events))
        print(row("bridge A → NATS → B (core)", bridgeThroughput, bridgePaced, sent: events))
        func summary() {
            print(String(format: "core bridge: %.2f× raw throughput (target ≥ 0.6×), p99 %.3f ms at 10k/s (target ≤ 2 ms); CPU per event %.2f× raw's",
                         bridgeThroughput.perSecond / rawThroughput.perSecond, bridgePaced.percentile(0.99),
                         bridgeThroughput.cpuMicrosecondsPerEvent / rawThroughput.cpuMicrosecondsPerEvent))
        }
        guard part == .all else { return summary() }
        let (asapThroughput, asapPaced, _) = bridged(server.url, count: events, durable: false, sendAsap: true)
        let (durableThroughput, durablePaced, _) = bridged(server.url, count: min(events, 100_000), durable: true)
        print(row("bridge, core, send_asap: true", asapThroughput, asapPaced, sent: events))
        print(row("bridge A → JetStream → B (durable)", durableThroughput, durablePaced, sent: min(events, 100_000)))
        summary()
        print(String(format: "core bridge with send_asap: %.2f× raw throughput, p99 %.3f ms at 10k/s",
                     asapThroughput.perSecond / rawThroughput.perSecond, asapPaced.percentile(0.99)))
        print(String(format: "durable bridge: %.2f× raw throughput, p99 %.3f ms at 10k/s",
                     durableThroughput.perSecond / rawThroughput.perSecond, durablePaced.percentile(0.99)))
    }

    private static func row(_ label: String, _ throughput: BridgeRun, _ paced: BridgeRun, sent: Int) -> String {
        label.padding(toLength: 34, withPad: " ", startingAt: 0)
            + String(format: "%10.0f/s  %6.2f µs  %6.3f ms  %6.3f ms  %6.3f ms", throughput.perSecond, throughput.cpuMicrosecondsPerEvent,
                     paced.percentile(0.5), paced.percentile(0.99), paced.percentile(0.999))
            + (throughput.received < sent ? "  (\(sent - throughput.received) lost)" : "")
    }

    /// The anchor: one nats.c connection publishes, another subscribes.
    private static func raw(_ url: String, count: Int, ratePerSecond: Int?) -> BridgeRun {
        var publisher: OpaquePointer?
        var subscriber: OpaquePointer?
        guard natsConnection_ConnectTo(&publisher, url) == NATS_OK, natsConnection_ConnectTo(&subscriber, url) == NATS_OK else {
            fatalError("raw: cannot connect to \(url)")
        }
        defer { natsConnection_Destroy(publisher); natsConnection_Destroy(subscriber) }
        let arrivals = Arrivals()
        var subscription: OpaquePointer?
        natsConnection_Subscribe(&subscription, subscriber, "raw.bench.tick", { _, _, message, closure in
            let now = MonotonicClock.now()
            let sentAt = natsMsg_GetData(message).map { UnsafeRawPointer($0).loadUnaligned(as: UInt64.self) } ?? 0
            Unmanaged<Arrivals>.fromOpaque(closure!).takeUnretainedValue().arrived(sentAt: sentAt, now: now)
            natsMsg_Destroy(message)
        }, Unmanaged.passUnretained(arrivals).toOpaque())
        natsSubscription_SetPendingLimits(subscription, -1, -1)
        natsConnection_Flush(subscriber)
        defer { natsSubscription_Destroy(subscription) }
        var payload = [UInt8](repeating: 0x2a, count: 60)
        let shares = CPUShares()
        let cpuStart = CPUTime.now()
        let start = MonotonicClock.now()
        for index in 0..<count {
            if let rate = ratePerSecond { pace(start: start, index: index, rate: rate) }
            var now = MonotonicClock.now()
            withUnsafeBytes(of: &now) { payload.replaceSubrange(0..<8, with: $0) }
            natsConnection_Publish(publisher, "raw.bench.tick", payload, Int32(payload.count))
        }
        natsConnection_Flush(publisher)
        var run = finish(arrivals, count: count, start: start, cpuStart: cpuStart)
        if ratePerSecond == nil { run.cpuShares = shares.line(events: count) }
        return run
    }

    /// Throughput rounds when an anchor is measured alongside: the raw anchor and the bridge take
    /// turns and each reports its median round, so a burst of load from the machine's other
    /// users moves one round, not the ratio.
    static let rounds = 3

    private static func median(_ runs: [BridgeRun]) -> BridgeRun {
        runs.sorted { $0.perSecond < $1.perSecond }[runs.count / 2]
    }

    /// Two buses, two bridges: A exports `bench.>`, B imports it. With an `anchor`, throughput is
    /// measured in ``rounds`` that alternate with it; returns the medians.
    private static func bridged(_ url: String, count: Int, durable: Bool, sendAsap: Bool = false,
                                anchor: (() -> BridgeRun)? = nil) -> (throughput: BridgeRun, paced: BridgeRun, anchor: BridgeRun?) {
        let state = NSTemporaryDirectory() + "eventbus-bench-bridge-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: state) }
        let pair: BenchBridgePair
        do {
            pair = try BenchBridgePair(url: url, stream: durable ? "BENCH" : nil, stateDirectory: state, logLevel: .error) { exporting, importing in
                exporting.exportBuffer = count + 1
                exporting.exportBufferBytes = .max
                exporting.sendAsap = sendAsap
                // As much as nats.c takes (it counts bytes in an int, and other subscriptions get
                // pending_limit × 1024 of them): the benchmark measures the path, not the limits.
                importing.pendingLimit = 2_000_000
                importing.pendingBytes = Int(Int32.max)
            }
        } catch {
            fatalError("bridge: \(error)")
        }
        defer { pair.stop() }
        let (busA, busB, a, b) = (pair.busA, pair.busB, pair.a, pair.b)
        let arrivals = Arrivals()
        let subscription = busB.publisher(for: [try! EventPattern("bench.>")]).sink { event in
            arrivals.arrived(sentAt: UInt64(event["t"]?.intValue ?? 0), now: MonotonicClock.now())
        }
        defer { subscription.cancel() }
        while a.statistics.state != "connected" || b.statistics.state != "connected" { System.sleep(for: .microseconds(10_000)) }
        // Warm up (and, durable, let the consumer bind): until an event gets through.
        while arrivals.progress.count == 0 {
            busA.post("bench.warmup", source: "bench", fields: ["n": 0, "t": .int(Int64(MonotonicClock.now()))])
            System.sleep(for: .microseconds(50_000))
        }
        System.sleep(for: .microseconds(200_000))
        arrivals.reset()
        func send(_ count: Int, rate: Int?) -> BridgeRun {
            let shares = CPUShares()
            let cpuStart = CPUTime.now()
            let start = MonotonicClock.now()
            for index in 0..<count {
                if let rate { pace(start: start, index: index, rate: rate) }
                // One clock reading for the event's monotonic time and the latency stamp, as the
                // raw anchor reads the clock once per message.
                let now = MonotonicClock.now()
                busA.post(Event(name: "bench.tick", source: "bench", fields: ["n": .int(Int64(index)), "t": .int(Int64(now))],
                                monotonicNanoseconds: now))
            }
            let posted = MonotonicClock.now()
            let exportedThen = a.statistics.exported, importedThen = arrivals.progress.count
            var run = finish(arrivals, count: count, start: start, cpuStart: cpuStart)
            arrivals.reset()
            if rate == nil {
                // Where the time goes: how fast A's bus took the posts, how far the exporter and B
                // had got when the last post returned.
                print(String(format: "  (%@%@: posting took %.3f s; by then %d exported, %d arrived on B)",
                             durable ? "durable" : "core", sendAsap ? ", send_asap" : "", Double(posted - start) / 1e9, Int(exportedThen), importedThen))
                run.cpuShares = shares.line(events: count)
            }
            return run
        }
        var throughputs: [BridgeRun] = []
        var anchors: [BridgeRun] = []
        for _ in 0..<(anchor == nil ? 1 : rounds) {
            if let anchor { anchors.append(anchor()) }
            throughputs.append(send(count, rate: nil))
        }
        if !anchors.isEmpty {
            print("  (rounds, events/s: raw " + anchors.map { String(format: "%.0f", $0.perSecond) }.joined(separator: " / ")
                  + "; bridge " + throughputs.map { String(format: "%.0f", $0.perSecond) }.joined(separator: " / ") + ")")
            print("  (CPU µs per event by thread, median rounds: raw " + median(anchors).cpuShares + "; bridge " + median(throughputs).cpuShares + ")")
        } else if let only = throughputs.first {
            print("  (CPU µs per event by thread: " + only.cpuShares + ")")
        }
        let paced = send(20_000, rate: 10_000)
        return (median(throughputs), paced, anchors.isEmpty ? nil : median(anchors))
    }

    /// Sleeps until event `index` is due at `rate` per second (sleeping, not spinning: on two
    /// cores a spinning sender would take a core from the path it measures).
    private static func pace(start: UInt64, index: Int, rate: Int) {
        let due = start + UInt64(index) * 1_000_000_000 / UInt64(rate)
        guard MonotonicClock.now() < due else { return }
        System.sleep(untilMonotonic: due)
    }

    /// Waits until `count` arrived or nothing arrived for 2 s.
    private static func finish(_ arrivals: Arrivals, count: Int, start: UInt64, cpuStart: Double) -> BridgeRun {
        var previous = -1
        var quietSince = MonotonicClock.now()
        while true {
            let progress = arrivals.progress
            if progress.count >= count { break }
            if progress.count != previous {
                previous = progress.count
                quietSince = MonotonicClock.now()
            } else if MonotonicClock.now() - quietSince > 2_000_000_000 {
                break
            }
            System.sleep(for: .microseconds(200))
        }
        let progress = arrivals.progress
        return BridgeRun(received: progress.count, seconds: Double(progress.last - start) / 1e9, latencies: arrivals.recorded,
                         cpuSeconds: CPUTime.now() - cpuStart)
    }
}

/// nats-server on a loopback port (a free one unless given) with JetStream in a folder (a
/// temporary one unless given); stopped by pid. Started again on the same port and folder, it is
/// the same server come back (``BridgeResumeBenchmark``).
final class BenchNATSServer {
    let url: String
    let port: Int
    let directory: String
    private let process = Process()
    private let ownsDirectory: Bool

    init(port: Int? = nil, directory: String? = nil) throws {
        let candidates: [String] = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        guard let executable = candidates.first(where: { (path: String) in System.isAccessible(path, .executable) }) else {
            throw POSIXError(.ENOENT)
        }
        ownsDirectory = directory == nil
        self.directory = directory ?? NSTemporaryDirectory() + "eventbus-bench-nats-\(getpid())"
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
        self.port = try port ?? Self.freePort()
        url = "nats://127.0.0.1:\(self.port)"
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["-js", "-sd", self.directory, "-a", "127.0.0.1", "-p", String(self.port)]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        var connection: OpaquePointer?
        // Every 5 ms: a restarted server's readiness is the instant the resume benchmark measures from.
        for _ in 0..<2_000 {
            if natsConnection_ConnectTo(&connection, url) == NATS_OK { break }
            System.sleep(for: .microseconds(5_000))
        }
        guard let connection else { throw POSIXError(.ETIMEDOUT) }
        natsConnection_Destroy(connection)
    }

    var pid: pid_t { process.processIdentifier }

    func stop() {
        try? System.sendSignal(SIGTERM, to: process.processIdentifier)
        process.waitUntilExit()
        if ownsDirectory { try? FileManager.default.removeItem(atPath: directory) }
    }

    /// A server that dies at an instant; its storage stays.
    func sigkill() {
        try? System.sendSignal(SIGKILL, to: process.processIdentifier)
        process.waitUntilExit()
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
