@testable import EventBusHost
import Foundation
import Testing

/// A module that logs in a loop must not drown eventbusd's own log (journald rate-limits the
/// whole service): its lines are limited, and the next line written says how many were left out.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ModuleLogLimitTests {
    @Test func aBurstThenARateThenWhatWasLeftOutIsSaid() {
        let second: UInt64 = 1_000_000_000
        let bucket = ModuleLogLimit.Bucket(ModuleLogLimit(burst: 3, perSecond: 2), now: 0)
        #expect((0..<3).map { _ in bucket.take(at: 0) } == [.write, .write, .write])
        #expect(bucket.take(at: 0) == .suppress)
        #expect(bucket.take(at: second / 4) == .suppress)  // half a line earned
        #expect(bucket.take(at: second / 2) == .writeAfterSuppressed(2))
        #expect(bucket.take(at: second / 2) == .suppress)
        // Quiet for long: back to the whole burst, not more.
        #expect((0..<4).map { _ in bucket.take(at: 100 * second) } == [.writeAfterSuppressed(1), .write, .write, .suppress])
    }

    @Test func aModuleLoggingInALoopIsCutToItsLimitAndTheHostSaysSo() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let daemon = try await DaemonProcessTests.Daemon.running("""
            control: {socket: \(socket)}
            modules:
              chatty:
                path: \(BuildProducts.fixture("FixtureCrashing"))
            """, in: directory)
        // The rate earns lines while the module logs: how many is bounded by how long it all
        // took, which a loaded machine stretches — the bound is measured, not assumed.
        let started = ContinuousClock.now
        _ = try ask(socket, ["op": "post", "name": "test.spam", "fields": ["count": .int(5_000)]])
        #expect(await daemon.waitFor("spam line 999"))
        try await Task.sleep(for: .milliseconds(1_100))  // at least a line's worth of rate for the next
        _ = try ask(socket, ["op": "post", "name": "test.spam", "fields": ["count": .int(1)]])
        #expect(await daemon.waitFor("module chatty logged too fast:"), "\(daemon.output.suffix(500))")
        let took = ContinuousClock.now - started
        let seconds = Double(took.components.seconds) + Double(took.components.attoseconds) / 1e18
        let written = daemon.output.components(separatedBy: "spam line ").count - 1
        // The burst (1 000), 100 a second after it, and the last line.
        let most = 1_000 + Int((seconds * 100).rounded(.up)) + 1
        #expect(written >= 1_000 && written <= most,
                "\(written) lines of 5 001 written in \(seconds) s; at most \(most)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }
}
