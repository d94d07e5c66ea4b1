import EventBusKit
import Foundation
import Logging
import NATSBridge
import Testing
import TestSupport

/// A durable consumer that says messages wait for it and delivers nothing for the importer's
/// stall wait (2 s) is made again after the host's position, and that is counted
/// (`consumersRemade`, `consumers_remade` in status) rather than only logged.
///
/// The stall is a real one, against a real nats-server: the importer is held inside its first
/// batch of a stored backlog, so the consumer has said that the rest waits; the server is then
/// frozen (SIGSTOP) and the importer let go. Its next pulls find nothing while
/// the backlog waits — as a consumer on a server whose stream lost its leader did in the cluster
/// chaos test. The server resumes once the count says the consumer was made again, and every
/// event must arrive once, in order.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct StalledConsumerTests {
    static let count = 1_000

    @Test func aConsumerThatDeliversNothingWhileMessagesWaitIsMadeAgainAndCounted() async throws {
        let directory = try TemporaryDirectory("bridge-stalled")
        let server = try NATSServer(storage: directory.path)
        defer { server.stop() }
        let busA = Bus(), busB = Bus()
        // The default ping interval (20 s): the frozen server must not be found dead, so that
        // what makes the consumer again is the stall check, not a reconnect.
        let (exporting, importing) = try appPair(server, durable: true)
        let a = try startBridge(exporting, busA, directory)
        let b = try startBridge(importing, busB, directory)
        defer { a.stop(); b.stop() }

        // The importer is held twice on the importing bus's subscriber (the bus hands a batch
        // to its subscribers on the posting thread, the importer's): on `app.hold` while the
        // backlog is stored, so that its next pull finds all of it waiting; then on the first
        // backlog event, while the server is frozen, so that the consumer has said how many wait.
        let held = (hold: DispatchSemaphore(value: 0), backlog: DispatchSemaphore(value: 0))
        let release = (hold: DispatchSemaphore(value: 0), backlog: DispatchSemaphore(value: 0))
        defer { release.hold.signal(); release.backlog.signal() }  // a failed expectation must not leave the importer held
        let holding = Collected(Set(["app.hold", "app.backlog"]))
        let (received, subscription) = try collect(busB, "app.>") { event in
            guard holding.update({ $0.remove(event.name) != nil }) else { return }
            if event.name == "app.hold" {
                held.hold.signal()
                release.hold.wait()
            } else {
                held.backlog.signal()
                release.backlog.wait()
            }
        }
        defer { subscription.cancel() }
        await warmUp(busA, received)
        #expect(b.statistics.consumersRemade == 0)

        busA.post("app.hold")
        #expect(await eventually { held.hold.wait(timeout: .now()) == .success }, "the importer never took app.hold: \(b.statistics)")
        let before = a.statistics.exported
        for n in 1...Self.count { busA.post("app.backlog", fields: ["n": .int(Int64(n))]) }
        #expect(await eventually { a.statistics.exported >= before + UInt64(Self.count) && a.statistics.exportInFlight == 0 }, "\(a.statistics)")
        release.hold.signal()
        #expect(await eventually { held.backlog.wait(timeout: .now()) == .success }, "the importer never reached the backlog: \(b.statistics)")

        server.suspend()
        defer { server.resume() }
        release.backlog.signal()
        #expect(await eventually { b.statistics.consumersRemade >= 1 },
                "no consumer made again with the server frozen: \(b.statistics)")
        server.resume()

        func backlog() -> [Int64] { received.value.filter { $0.name == "app.backlog" }.compactMap { $0["n"]?.intValue } }
        #expect(await eventually { Set(backlog()).count == Self.count }, "received \(Set(backlog()).count) of \(Self.count); \(b.statistics)")
        try await Task.sleep(for: .seconds(1))  // a duplicate would arrive now
        #expect(backlog() == Array(1...Int64(Self.count)), "not each once in order: \(backlog().count) received")
        #expect(b.statistics.lost == 0)
        print("stalled consumer: made again \(b.statistics.consumersRemade) time(s); \(Self.count) events arrived once, in order")
    }
}
