import ControlProtocol
import Foundation
import Testing
import TestSupport

/// What a durable importing host posts again after a SIGKILL during a server outage: its
/// position must go on being written while it is disconnected, so the next life posts again at
/// most its last second or so of imports — not everything it took in since the position was
/// last written before the outage.
@Suite(.serialized, .enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.realDaemon, .nats), .skippable(.realDaemon, .nats))
struct BridgeOutageRepostTests {
    /// beta imports alpha's steady stream; the nats-server is SIGKILLed, beta is SIGKILLed 6 s
    /// into the outage (and not before its position records what it took in: the check that
    /// failed while the position was written only when connected), the server comes back on its
    /// storage after 8 s, and beta starts again. Asserted: beta's next life posts again nothing
    /// its killed life had posted (an outage's first second is long past). Printed: how old the
    /// oldest event posted again was at the kill (its import instant is the tail line's `mono`).
    @Test func aSIGKILLDuringAnOutagePostsAgainNothingFromBeforeIt() async throws {
        let directory = try TemporaryDirectory("bridge-outage")
        var server = try NATSServer(storage: directory.path)
        let a = try BridgedHost("alpha", server: server, in: directory, bridge: BridgeDurableTests.settings)
        let b = try BridgedHost("beta", server: server, in: directory, bridge: BridgeDurableTests.settings,
                                control: BridgedHost.wholeLifeControl)
        try await b.start()
        try await a.start()
        #expect(await eventually { b.daemon?.output.contains("importing from stream TESTBUS") == true })
        let first = try TailCollector(b.socket, ["load.>", "bridge.gap"])
        // alpha is posted to from a thread of its own, 20 events every 50 ms, during the outage
        // too (they wait in alpha's export buffer).
        let poster = BackgroundPoster(a.socket, "load.tick", batch: 20, every: .milliseconds(50))
        #expect(await eventually { first.named("load.").count >= 200 }, "\(b.health)")
        let port = server.port
        server.sigkill()
        let outage = ContinuousClock.now
        try await Task.sleep(until: outage + .seconds(6))
        let unrecordedAtSix = b.count("import_unrecorded")
        let recorded = await eventually { b.count("import_unrecorded") == 0 }
        #expect(recorded, "beta's position did not record what it took in before the outage (\(b.count("import_unrecorded")) unrecorded, \(unrecordedAtSix) at 6 s): \(b.health)")
        let unrecordedAtKill = b.count("import_unrecorded")
        let killed = MonotonicNanoseconds.now
        await b.kill()
        try await Task.sleep(until: max(.now, outage + .seconds(8)))
        server = try NATSServer(storage: directory.path, port: port)
        try await b.start()
        let second = try TailCollector(b.socket, ["load.>", "bridge.gap"])
        let total = poster.stop()
        let expected = Set((1...total).map { "alpha:\($0)" })
        #expect(await eventually { expected.isSubset(of: Set(first.keys("load.") + second.keys("load."))) },
                "\(expected.subtracting(first.keys("load.") + second.keys("load.")).count) of \(total) missing: \(b.health)")
        let again = Set(first.keys("load.")).intersection(second.keys("load."))
        let ages = first.named("load.").filter { again.contains("alpha:\($0["fields"]?["n"]?.intValue ?? -1)") }
            .compactMap { $0["mono"]?.intValue }.map { Double(Int64(killed) - $0) / 1e9 }
        print("outage SIGKILL test: \(total) events; import_unrecorded \(unrecordedAtSix) at 6 s into the outage, \(unrecordedAtKill) at the kill; \(again.count) posted again, the oldest imported \(ages.max().map { String(format: "%.2f s", $0) } ?? "-") before the kill")
        #expect(again.isEmpty, "posted again: \(again.count)")
        #expect(first.named("bridge.gap").isEmpty && second.named("bridge.gap").isEmpty)
        await a.kill(SIGTERM)
        await b.kill(SIGTERM)
        server.stop()
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the clock of the tail lines' `mono`, shared by the
/// processes of one machine.
enum MonotonicNanoseconds {
    static var now: UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
