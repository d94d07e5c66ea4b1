import CNATS
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import NATSBridge
import SystemCalls

// Resume benchmark: how soon imports flow again after a nats-server comes back. Host A's bus
// posts `bench.tick` every 5 ms (each with its CLOCK_MONOTONIC post time) through its bridge to
// host B's, both with the bridge's default reconnect schedule unless `max_reconnect_wait` is
// given. The server is SIGKILLed, kept down for an outage (``BridgeResumeBenchmark/outages``), and
// started again on its port and storage; the clock starts when it accepts a client (a nats.c
// connect succeeds, polled every 5 ms) and stops at B's first import after that. Core mode:
// what A published before B was back is lost (core NATS), so the first import is the first
// event B is there for. Durable: B's first import is the oldest event it had not taken in.

enum BridgeResumeBenchmark {
    /// Outages, in seconds: 1, 3 and 8 twice each — short ones meet the reconnect schedule's
    /// first, quick attempts, long ones its longest wait — then four kills of 0.2 s, each as
    /// soon as imports flow again (a server that keeps dying).
    static let outages: [Double] = [1, 3, 8, 1, 3, 8, 0.2, 0.2, 0.2, 0.2]

    static func run(mode: String, maxReconnectWait: Duration?) {
        var load = [0.0, 0.0, 0.0]
        _ = getloadavg(&load, 3)
        let schedule = maxReconnectWait.map { "max_reconnect_wait \($0)" } ?? "the default reconnect schedule"
        print("resume after a server restart, \(schedule) (load \(String(format: "%.1f", load[0]))):")
        for durable in mode == "both" ? [false, true] : [mode == "durable"] {
            let resumes = measure(durable: durable, maxReconnectWait: maxReconnectWait)
            let sorted = resumes.sorted()
            guard let worst = sorted.last else { continue }
            let median = sorted[sorted.count / 2]
            print(String(format: "  %@: imports again %@ s after the server accepted clients; median %.2f s, max %.2f s — target ≤ 2 s at load ≤ 4: %@",
                         durable ? "durable" : "core", resumes.map { String(format: "%.2f", $0) }.joined(separator: " / "), median, worst,
                         worst <= 2 ? "met" : "MISSED"))
        }
    }

    /// The seconds from each restarted server's readiness to B's next import, one per outage.
    private static func measure(durable: Bool, maxReconnectWait: Duration?) -> [Double] {
        let state = NSTemporaryDirectory() + "eventbus-bench-resume-\(getpid())"
        let storage = NSTemporaryDirectory() + "eventbus-bench-resume-nats-\(getpid())"
        defer {
            try? FileManager.default.removeItem(atPath: state)
            try? FileManager.default.removeItem(atPath: storage)
        }
        guard var server = try? BenchNATSServer(directory: storage) else {
            print("  cannot start nats-server (apt-get install nats-server)")
            return []
        }
        let pair: BenchBridgePair
        do {
            pair = try BenchBridgePair(url: server.url, stream: durable ? "RESUME" : nil, stateDirectory: state, logLevel: .critical) { exporting, importing in
                if let maxReconnectWait {
                    exporting.maxReconnectWait = maxReconnectWait
                    importing.maxReconnectWait = maxReconnectWait
                }
            }
        } catch {
            print("  bridge: \(error)")
            return []
        }
        let (busA, busB) = (pair.busA, pair.busB)
        let lastImport = Atomic64()
        let subscription = busB.publisher(for: [try! EventPattern("bench.>")]).sink { _ in lastImport.store(MonotonicClock.now()) }
        let sending = Atomic64()
        sending.store(1)
        let sender = Thread {
            var n: Int64 = 0
            while sending.load() == 1 {
                n += 1
                busA.post("bench.tick", source: "bench", fields: ["n": .int(n), "t": .int(Int64(MonotonicClock.now()))])
                System.sleep(for: .microseconds(5_000))
            }
        }
        sender.start()
        defer {
            sending.store(0)
            subscription.cancel()
            pair.stop()
            server.stop()
        }
        var resumes: [Double] = []
        for outage in outages {
            // Flowing first: an import within the last 100 ms.
            while MonotonicClock.now() &- lastImport.load() > 100_000_000 { System.sleep(for: .microseconds(10_000)) }
            let port = server.port
            server.sigkill()
            System.sleep(for: .seconds(outage))
            guard let restarted = try? BenchNATSServer(port: port, directory: storage) else {
                print("  nats-server did not start again on port \(port)")
                return resumes
            }
            server = restarted
            let ready = MonotonicClock.now()
            // Bounded, so a bridge that never resumes ends the run with what it says.
            while lastImport.load() < ready, MonotonicClock.now() &- ready < 60_000_000_000 { System.sleep(for: .microseconds(1_000)) }
            let resumed = lastImport.load()
            guard resumed >= ready else {
                print("  no import within 60 s of the server's return after a \(outage) s outage")
                return resumes
            }
            resumes.append(Double(resumed - ready) / 1e9)
        }
        return resumes
    }
}

/// A 64-bit value shared between the benchmark's threads.
private final class Atomic64: @unchecked Sendable {
    private let lock = NSLock()
    private var value: UInt64 = 0
    func store(_ new: UInt64) { lock.withLock { value = new } }
    func load() -> UInt64 { lock.withLock { value } }
}
