import EventBusKit
import Foundation
import Logging
import NATSBridge
import Testing
import TestSupport

/// A server that hangs (SIGSTOP: the TCP connection stays up, nothing is read) while the bridge
/// exports more than the sockets take in (400 events of 50 kB against a few MB of socket
/// buffers), so the exporter's write fills them and waits. What must hold meanwhile: status
/// answers at once, the write deadline finds the connection dead, stopping ends; and after the
/// server resumes every event arrived (durable) or was announced (core).
///
/// Each test resumes the server before stopping the bridges (the `defer`s run in reverse): a
/// bridge that hangs on the frozen server then fails its test instead of hanging the suite.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct BridgeHungServerTests {
    static let count = 400
    static let pad = String(repeating: "x", count: 50_000)

    /// The default ping interval (20 s): within these tests only the write deadline can find
    /// the connection dead. A short reconnect wait, so the resumed server is found soon.
    /// `writeDeadline`: the status tests take a long one (8 s), so that a status that waited on
    /// nats.c's lock would wait far longer than the test's bound, not just about as long.
    func config(_ host: String, _ server: NATSServer, durable: Bool, writeDeadline: Duration = .seconds(2)) -> BridgeConfig {
        var config = BridgeConfig(servers: [server.url], host: host)
        config.maxReconnectWait = .seconds(1)
        config.writeDeadline = writeDeadline
        if durable { config.durable = BridgeConfig.Durable() }
        return config
    }

    /// Asks `bridge.statistics` again and again for `duration`, each time on a thread of its own;
    /// returns the longest wait, or nil if one did not answer within `bound`.
    func longestStatusWait(_ bridge: NATSBridge, for duration: Duration, bound: Duration) async -> Duration? {
        let end = ContinuousClock.now + duration
        var longest = Duration.zero
        while ContinuousClock.now < end {
            let started = ContinuousClock.now
            guard answers(within: bound, { _ = bridge.statistics }) else { return nil }
            longest = max(longest, ContinuousClock.now - started)
            try? await Task.sleep(for: .milliseconds(100))
        }
        return longest
    }

    func postLarge(_ bus: Bus, _ name: String) {
        for n in 1...Self.count { bus.post(name, fields: ["n": .int(Int64(n)), "pad": .string(Self.pad)]) }
    }

    /// Core mode: status answers while the exporter is stuck; after the write deadline the
    /// connection is down (the server still frozen); after it resumes, what did not arrive was
    /// announced — counted (`reconnect_buffer`, `publish_failed`) or, for what the sockets held
    /// when the connection broke, as `export_unconfirmed`.
    @Test func aHungServerInCoreModeLeavesStatusAnsweringAndAnnouncesWhatItLost() async throws {
        let directory = try TemporaryDirectory("bridge-hung")
        let server = try NATSServer(storage: directory.path)
        defer { server.stop() }
        let busA = Bus(), busB = Bus()
        var exporting = config("alpha", server, durable: false, writeDeadline: .seconds(8))
        exporting.export = [try EventPattern("app.>")]
        var importing = config("beta", server, durable: false)
        importing.import = [try EventPattern("app.>")]
        let a = try startBridge(exporting, busA, directory)
        let b = try startBridge(importing, busB, directory)
        defer { a.stop(); b.stop() }
        let (received, subscription) = try collect(busB, "app.>")
        defer { subscription.cancel() }
        let (gapEvents, gapSubscription) = try collect(busA, "bridge.gap")
        defer { gapSubscription.cancel() }
        await warmUp(busA, received)

        server.suspend()
        defer { server.resume() }
        let frozen = Date()
        postLarge(busA, "app.large")
        // The exporter fills the sockets within a moment and waits in its write (8 s).
        let longest = await longestStatusWait(a, for: .seconds(5), bound: .seconds(2))
        #expect(longest != nil, "statistics did not answer within 2 s while the server was frozen")
        // The write deadline breaks the connection, though no ping could tell.
        #expect(await eventually { holds(within: .seconds(10)) { a.statistics.state == "reconnecting" } },
                "still \(a.statistics.state) with the server frozen")
        #expect(a.statistics.disconnects >= 1)
        let broken = Date()
        server.resume()

        #expect(await eventually { a.statistics.reconnects >= 1 && a.statistics.exportQueued == 0 }, "\(a.statistics)")
        // Published after everything else: once it arrived, all that will ever arrive has.
        #expect(await eventually {
            busA.post("app.after")
            return received.value.contains { $0.name == "app.after" }
        }, "\(a.statistics)")
        try await Task.sleep(for: .milliseconds(600))  // a late announcement would come now
        let large = received.value.filter { $0.name == "app.large" }.compactMap { $0["n"]?.intValue }
        let gaps = gapEvents.value.compactMap(BridgeGap.init)
        let counted = gaps.filter { $0.kind == .reconnectBuffer || $0.kind == .publishFailed }.reduce(0) { $0 + ($1.dropped ?? 0) }
        let unconfirmed = gaps.filter { $0.kind == .exportUnconfirmed }
        // Never twice. The order may break where the connection did (seen once in several full
        // runs: nats.c still held some publishes when its write failed); docs/fleet-operations.md says so.
        #expect(Set(large).count == large.count, "duplicates")
        #expect(large.count + counted <= Self.count)
        let missing = Self.count - large.count - counted
        if missing > 0 {
            // Lost in the sockets when the connection broke: announced, count unknown.
            #expect(unconfirmed.count >= 1, "\(missing) event(s) neither arrived nor were announced; gaps: \(gaps)")
            #expect(unconfirmed.allSatisfy { $0.dropped == nil && $0.subjects == ["eventbus.alpha.>"] })
            #expect(unconfirmed.allSatisfy { $0.from >= frozen.addingTimeInterval(-1) && $0.until <= broken.addingTimeInterval(1) })
        }
        print("hung server, core, \(Self.count) exports of 50 kB: \(large.count) arrived, \(counted) announced lost (counted), \(missing) lost in the sockets (announced as export_unconfirmed: \(!unconfirmed.isEmpty)); longest status wait while frozen \(longest.map { "\($0)" } ?? "-")")
    }

    /// Durable mode: the same, and after the server resumes every event arrives, once.
    @Test func aHungServerInDurableModeLeavesStatusAnsweringAndLosesNothing() async throws {
        let directory = try TemporaryDirectory("bridge-hung")
        let server = try NATSServer(storage: directory.path)
        defer { server.stop() }
        let busA = Bus(), busB = Bus()
        var exporting = config("alpha", server, durable: true, writeDeadline: .seconds(8))
        exporting.export = [try EventPattern("app.>")]
        var importing = config("beta", server, durable: true)
        importing.import = [try EventPattern("app.>")]
        let a = try startBridge(exporting, busA, directory)
        let b = try startBridge(importing, busB, directory)
        defer { a.stop(); b.stop() }
        let (received, subscription) = try collect(busB, "app.>")
        defer { subscription.cancel() }
        let (gapEvents, gapSubscription) = try collect(busA, "bridge.gap")
        defer { gapSubscription.cancel() }
        await warmUp(busA, received)

        server.suspend()
        defer { server.resume() }
        postLarge(busA, "app.large")
        let longest = await longestStatusWait(a, for: .seconds(5), bound: .seconds(2))
        #expect(longest != nil, "statistics did not answer within 2 s while the server was frozen")
        #expect(await eventually { holds(within: .seconds(10)) { a.statistics.state == "reconnecting" } },
                "still \(a.statistics.state) with the server frozen")
        server.resume()

        func large() -> [Int64] { received.value.filter { $0.name == "app.large" }.compactMap { $0["n"]?.intValue } }
        #expect(await eventually { Set(large()).count == Self.count },
                "received \(Set(large()).count) of \(Self.count); \(a.statistics)")
        try await Task.sleep(for: .seconds(1))  // a duplicate would arrive now
        #expect(large().count == Self.count, "duplicates: \(large().count - Set(large()).count)")
        #expect(Set(large()) == Set((1...Int64(Self.count))))
        #expect(gapEvents.value.isEmpty, "\(gapEvents.value)")
        #expect(a.statistics.lost == 0 && a.statistics.disconnects >= 1)
        print("hung server, durable, \(Self.count) exports of 50 kB: all arrived once after it resumed; longest status wait while frozen \(longest.map { "\($0)" } ?? "-")")
    }

    /// A host stopping while its server hangs, the exporter stuck in a write and an import
    /// subscription to take down: `stop` ends (the write deadline frees nats.c's lock).
    @Test func stoppingWhileTheServerHangsEnds() async throws {
        let directory = try TemporaryDirectory("bridge-hung")
        let server = try NATSServer(storage: directory.path)
        defer { server.stop() }
        let bus = Bus()
        var both = config("alpha", server, durable: false)
        both.export = [try EventPattern("app.>")]
        both.import = [try EventPattern("other.>")]
        let a = try startBridge(both, bus, directory)
        #expect(await eventually { a.statistics.state == "connected" })
        server.suspend()
        defer { server.resume() }
        postLarge(bus, "app.large")
        try await Task.sleep(for: .seconds(1))  // the exporter is in its write now
        let started = ContinuousClock.now
        let stopped = answers(within: patience) { a.stop() }
        #expect(stopped, "stop did not end with the server frozen")
        print("stopping with a hung server took \(ContinuousClock.now - started)")
    }
}

/// Runs `body` on a thread of its own and waits for it at most `bound`: whether it ended. A
/// body that did not goes on running (it cannot be stopped), so callers make sure it can end.
func answers(within bound: Duration, _ body: @escaping @Sendable () -> Void) -> Bool {
    let done = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        body()
        done.signal()
    }
    return done.wait(timeout: .now() + .milliseconds(Int(bound.components.seconds * 1_000))) == .success
}

/// Whether `body` answered true within `bound` (on a thread of its own, as `answers(within:_:)`).
func holds(within bound: Duration, _ body: @escaping @Sendable () -> Bool) -> Bool {
    let result = Collected<Bool>(false)
    guard answers(within: bound, { result.update { $0 = body() } }) else { return false }
    return result.value
}
