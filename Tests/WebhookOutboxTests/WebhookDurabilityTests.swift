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
        let port = try NATSServer.freePort()
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
        #expect(storedFiles(folder.at("outbox")).isEmpty)
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func aSigkillDuringEnqueuesLosesNoAcknowledgedDelivery() async throws {
        let folder = try TemporaryDirectory("webhook")
        let port = try NATSServer.freePort()
        let acknowledged = try await firstLife(folder: folder, count: 100_000, killAfter: 200, port: port)
        #expect(acknowledged.count >= 200)

        let receiver = try await WebhookReceiver(in: folder, port: port)
        let (logger, log) = recordingLogger()
        let (outbox, reports) = makeOutbox(folder.at("outbox"), concurrency: 8, logger: logger)
        try outbox.start()
        // Each acknowledged one, and perhaps the one whose acknowledgement the kill cut off.
        let recovered = try #require(reports.recovered.first)
        #expect(recovered >= acknowledged.count && recovered <= acknowledged.count + 1)
        #expect(await eventually { reports.delivered.count == recovered })
        #expect(Set(acknowledged).isSubset(of: Set(receiver.requests.compactMap(\.key))))
        #expect(!log.entries.contains { $0.level == .error }, "\(log.entries.map(\.message))")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: folder.at("outbox"))) ?? []).isEmpty)
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func tornAndCorruptFilesAreSetAsideWithALog() async throws {
        let folder = try TemporaryDirectory("webhook")
        let outboxFolder = folder.at("outbox")
        let port = try NATSServer.freePort()
        // A first life stores one delivery (to a port nobody listens on) and stops.
        let (first, _) = makeOutbox(outboxFolder, backoff: WebhookBackoff(base: .seconds(600), cap: .seconds(600)))
        try first.start()
        #expect(first.enqueue(delivery("key-whole", to: "http://127.0.0.1:\(port)/hook")))
        await first.shutdown(within: .seconds(5))
        let whole = try #require(storedFiles(outboxFolder).first)
        let bytes = try #require(FileManager.default.contents(atPath: outboxFolder + "/" + whole))
        // Beside it: a torn copy, one with a flipped byte, garbage, an empty file, a .tmp.
        var flipped = bytes
        flipped[flipped.count - 5] ^= 0x20
        let damaged: [(String, Data)] = [("00000000000000000100.webhook", bytes.prefix(bytes.count - 7)),
                                         ("00000000000000000101.webhook", flipped),
                                         ("00000000000000000102.webhook", Data("{\"id\":".utf8)),
                                         ("00000000000000000103.webhook", Data()),
                                         ("00000000000000000104.webhook.tmp", bytes.prefix(20))]
        for (name, content) in damaged {
            #expect(FileManager.default.createFile(atPath: outboxFolder + "/" + name, contents: content))
        }

        let receiver = try await WebhookReceiver(in: folder, port: port)
        let (logger, log) = recordingLogger()
        let (outbox, reports) = makeOutbox(outboxFolder, logger: logger)
        try outbox.start()
        #expect(reports.recovered == [1])
        #expect(await eventually { reports.delivered.count == 1 })
        #expect(receiver.requests.compactMap(\.key) == ["key-whole"])
        let skipped = log.entries.filter { $0.level == .error }.map(\.message.description)
        #expect(skipped.count == 4, "\(skipped)")
        #expect(skipped.allSatisfy { $0.hasPrefix("webhook outbox file skipped: ") })
        #expect(skipped.contains { $0.contains("(torn)") })
        #expect(skipped.contains { $0.contains("checksum mismatch") })
        let left = try FileManager.default.contentsOfDirectory(atPath: outboxFolder).sorted()
        #expect(left == ["00000000000000000100.webhook.corrupt", "00000000000000000101.webhook.corrupt",
                         "00000000000000000102.webhook.corrupt", "00000000000000000103.webhook.corrupt"])
        #expect(outbox.statistics.pending == 0)
        await outbox.shutdown(within: .seconds(5))
    }
}
