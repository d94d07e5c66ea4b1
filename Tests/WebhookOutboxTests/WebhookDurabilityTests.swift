import Foundation
import InMemoryLogging
import Testing
import TestSupport
@testable import WebhookOutbox

/// What a life of the outbox leaves for the next: deliveries acknowledged before a SIGKILL are all
/// delivered after it; a file that is not a whole delivery is set aside with a log, never loaded.
@Suite struct WebhookDurabilityTests {
    /// The first life: `webhook-outbox-fixture` enqueues `count` deliveries to a port nobody
    /// listens on, printing each id it was acknowledged; SIGKILLed once `killAfter` were.
    /// Returns the acknowledged ids.
    private func firstLife(folder: TemporaryDirectory, count: Int, killAfter: Int, port: Int) async throws -> [String] {
        let fixture = try #require(BuiltExecutable.path(named: "webhook-outbox-fixture"),
                                   "webhook-outbox-fixture is built by swift build --build-tests")
        let output = folder.at("fixture.out")
        #expect(FileManager.default.createFile(atPath: output, contents: nil))
        let child = Process()
        child.executableURL = URL(fileURLWithPath: fixture)
        child.arguments = [folder.at("outbox"), String(count), "http://127.0.0.1:\(port)/hook"]
        child.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        child.standardInput = FileHandle.nullDevice
        try child.run()
        func acknowledged() -> [String] {
            let text = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            // Only whole lines: the last may be half-written when the process dies.
            return text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
                .filter { $0.hasPrefix("queued ") }.map { String($0.dropFirst("queued ".count)) }
        }
        #expect(await eventually { acknowledged().count >= killAfter || !child.isRunning })
        #expect(child.isRunning, "the fixture ended by itself: \(acknowledged().count) queued")
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        return acknowledged()
    }

    @Test func everyDeliveryQueuedBeforeASigkillIsDeliveredAfterIt() async throws {
        let folder = try TemporaryDirectory("webhook")
        let port = try freeLoopbackPort()
        let count = 50
        let acknowledged = try await firstLife(folder: folder, count: count, killAfter: count, port: port)
        #expect(acknowledged.count == count)

        let receiver = try await WebhookReceiver(in: folder, port: port)
        let (outbox, reports) = makeOutbox(folder.at("outbox"))
        try outbox.start()
        #expect(reports.recovered == [count])
        #expect(await eventually { reports.delivered.count == count })
        let keys = Set(receiver.requests.compactMap(\.key))
        #expect(keys == Set(acknowledged))
        #expect(Set(receiver.requests.map(\.body)).count == count)
        #expect(outbox.statistics.delivered == count && outbox.statistics.pending == 0)
        #expect(try pendingOnDisk(folder.at("outbox")).isEmpty)
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func aSigkillDuringEnqueuesLosesNoAcknowledgedDelivery() async throws {
        let folder = try TemporaryDirectory("webhook")
        let port = try freeLoopbackPort()
        let acknowledged = try await firstLife(folder: folder, count: 100_000, killAfter: 200, port: port)
        #expect(acknowledged.count >= 200)

        let receiver = try await WebhookReceiver(in: folder, port: port)
        let (logger, log) = recordingLogger()
        let (outbox, reports) = makeOutbox(folder.at("outbox"), concurrency: 8, logger: logger)
        try outbox.start()
        // Each acknowledged one, and perhaps the one whose acknowledgement the kill cut off.
        let recovered = try #require(reports.recovered.first)
        #expect(recovered >= acknowledged.count && recovered <= acknowledged.count + 1)
        // How many were queued before the kill depends on the machine's speed (a loaded one
        // queues thousands): wait while deliveries go on, and give up only when they stall.
        var delivered = -1
        var lastProgress = ContinuousClock.now
        while reports.delivered.count != recovered, ContinuousClock.now - lastProgress < patience {
            if reports.delivered.count != delivered {
                delivered = reports.delivered.count
                lastProgress = .now
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(reports.delivered.count == recovered)
        #expect(Set(acknowledged).isSubset(of: Set(receiver.requests.compactMap(\.key))))
        #expect(!log.entries.contains { $0.level == .error }, "\(log.entries.map(\.message))")
        #expect(try pendingOnDisk(folder.at("outbox")).isEmpty)
        await outbox.shutdown(within: .seconds(5))
    }

    /// One folder, one outbox at a time: a second one would compact away what the first appends.
    @Test func aSecondOutboxOnTheFolderIsRefusedUntilTheFirstStops() async throws {
        let folder = try TemporaryDirectory("webhook")
        let url = "http://127.0.0.1:\(try freeLoopbackPort())/hook"
        let (first, firstReports) = makeOutbox(folder.at("outbox"), backoff: WebhookBackoff(base: .seconds(600), cap: .seconds(600)))
        try first.start()
        #expect(first.enqueue(delivery("key-first", to: url)))
        let (second, secondReports) = makeOutbox(folder.at("outbox"))
        do {
            try second.start()
            Issue.record("a second outbox started on a folder the first has open")
        } catch {
            #expect(error.code == .inUse)
        }
        await first.shutdown(within: .seconds(5))
        #expect(!first.enqueue(delivery("key-late", to: url)))
        #expect(firstReports.dropped.map(\.reason) == ["the outbox has stopped"])
        let (third, thirdReports) = makeOutbox(folder.at("outbox"), backoff: WebhookBackoff(base: .seconds(600), cap: .seconds(600)))
        try third.start()
        #expect(thirdReports.recovered == [1])
        #expect(secondReports.value.isEmpty)
        await second.shutdown(within: .seconds(1))
        await third.shutdown(within: .seconds(5))
    }

    /// The last write of a life cut short (a torn tail) is ignored with a notice; a segment
    /// damaged in its middle keeps the records before the damage, is logged as an error and set
    /// aside — the loader never traps.
    @Test func tornAndDamagedSegmentsAreReadUpToTheDamageWithALog() async throws {
        let folder = try TemporaryDirectory("webhook")
        let outboxFolder = folder.at("outbox")
        let port = try freeLoopbackPort()
        // A first life stores three deliveries (to a port nobody listens on) and stops.
        let (first, _) = makeOutbox(outboxFolder, backoff: WebhookBackoff(base: .seconds(600), cap: .seconds(600)))
        try first.start()
        for index in 0..<3 { #expect(first.enqueue(delivery("key-\(index)", to: "http://127.0.0.1:\(port)/hook"))) }
        await first.shutdown(within: .seconds(5))
        let segments = try FileManager.default.contentsOfDirectory(atPath: outboxFolder).sorted()
        let segment = try #require(segments.last)
        let bytes = try #require(FileManager.default.contents(atPath: outboxFolder + "/" + segment))
        // The torn tail: the first 20 bytes of another record appended to the segment.
        try (bytes + bytes.prefix(20)).write(to: URL(fileURLWithPath: outboxFolder + "/" + segment))
        // A newer segment damaged in its middle: its first record whole, then a flipped byte in
        // the second, then the third.
        let records = LogRecord.decode(Array(bytes)).records
        #expect(records.count == 3)
        var damaged = try records.prefix(3).enumerated().map { index, record -> [UInt8] in
            guard case .add(_, var delivery) = record else { return [] }
            delivery.id = "later-\(index)"
            return try LogRecord.add(sequence: 100 + UInt64(index), delivery: delivery).encoded()
        }
        damaged[1][damaged[1].count - 3] ^= 0x20
        let damagedName = String(format: "%020d.log", 90)
        #expect(FileManager.default.createFile(atPath: outboxFolder + "/" + damagedName, contents: Data(damaged.joined())))

        let receiver = try await WebhookReceiver(in: folder, port: port)
        let (logger, log) = recordingLogger()
        let (outbox, reports) = makeOutbox(outboxFolder, logger: logger)
        try outbox.start()
        #expect(reports.recovered == [4])
        #expect(await eventually { reports.delivered.count == 4 })
        #expect(Set(receiver.requests.compactMap(\.key)) == ["key-0", "key-1", "key-2", "later-0"])
        let notices = log.entries.filter { $0.level == .notice }.map(\.message.description)
        #expect(notices.contains { $0.contains("\(segment) ends in a write the previous life did not finish") }, "\(notices)")
        let errors = log.entries.filter { $0.level == .error }.map(\.message.description)
        #expect(errors.count == 1, "\(errors)")
        #expect(errors.first?.contains("\(damagedName) is damaged (a record whose checksum does not match") == true)
        let left = try FileManager.default.contentsOfDirectory(atPath: outboxFolder)
        #expect(left.contains(damagedName + ".corrupt"))
        #expect(!left.contains(segment))
        #expect(try pendingOnDisk(outboxFolder).isEmpty)
        await outbox.shutdown(within: .seconds(5))
    }
}
