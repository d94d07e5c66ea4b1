import Foundation
import Testing
import TestSupport
@testable import WebhookOutbox

/// The outbox against a real HTTP receiver: what is delivered, retried, given up and dropped,
/// and the key each attempt carries.
@Suite struct WebhookDeliveryTests {
    @Test func deliveredOnceWithItsKey() async throws {
        let folder = try TemporaryDirectory("webhook")
        let receiver = try await WebhookReceiver(in: folder)
        let (outbox, reports) = makeOutbox(folder.at("outbox"))
        try outbox.start()
        let headers = [WebhookHeader(name: "Content-Type", value: "application/json"),
                       WebhookHeader(name: "X-Rule", value: "disk-full"),
                       WebhookHeader(name: "idempotency-key", value: "not-this-one")]
        #expect(outbox.enqueue(delivery("key-1", to: receiver.url("/hooks/disk"), body: #"{"used":97}"#, headers: headers)))
        #expect(await eventually { reports.delivered.count == 1 })
        let requests = receiver.requests
        #expect(requests.count == 1)
        let request = try #require(requests.first)
        #expect(request.key == "key-1")
        #expect(request.headers(named: "Idempotency-Key") == ["key-1"])
        #expect(request.method == "POST")
        #expect(request.path == "/hooks/disk")
        #expect(request.body == #"{"used":97}"#)
        #expect(request.headers(named: "X-Rule") == ["disk-full"])
        #expect(request.headers(named: "Content-Type") == ["application/json"])
        let delivered = try #require(reports.delivered.first)
        #expect(delivered.status == 200 && delivered.attempts == 1 && delivered.responseTail == "status 200")
        #expect(outbox.statistics == WebhookStatistics(pending: 0, delivered: 1, attempts: 1))
        #expect(try pendingOnDisk(folder.at("outbox")).isEmpty)
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func serverErrorsAreRetriedWithTheSameKey() async throws {
        let folder = try TemporaryDirectory("webhook")
        let receiver = try await WebhookReceiver(in: folder)
        let (outbox, reports) = makeOutbox(folder.at("outbox"))
        try outbox.start()
        #expect(outbox.enqueue(delivery("key-500", to: receiver.url("/do/500,503,200"))))
        #expect(await eventually { reports.delivered.count == 1 })
        #expect(receiver.requests.map(\.key) == ["key-500", "key-500", "key-500"])
        #expect(reports.delivered.first?.attempts == 3)
        #expect(reports.retrying.map(\.attempt) == [1, 2])
        #expect(reports.retrying.first?.reason == "HTTP 500 Internal Server Error")
        #expect(outbox.statistics == WebhookStatistics(pending: 0, delivered: 1, attempts: 3, retries: 2))
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func retryAfterIsAFloorOnTheWait() async throws {
        let folder = try TemporaryDirectory("webhook")
        let receiver = try await WebhookReceiver(in: folder)
        let (outbox, reports) = makeOutbox(folder.at("outbox"))
        try outbox.start()
        #expect(outbox.enqueue(delivery("key-429", to: receiver.url("/do/429:1,200"))))
        #expect(await eventually { reports.delivered.count == 1 })
        let retry = try #require(reports.retrying.first)
        #expect(retry.reason == "HTTP 429 Too Many Requests")
        #expect(retry.delay >= .seconds(1))
        #expect(reports.delivered.first?.attempts == 2)
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func aHungReceiverTimesOutAndIsRetried() async throws {
        let folder = try TemporaryDirectory("webhook")
        let receiver = try await WebhookReceiver(in: folder)
        let (outbox, reports) = makeOutbox(folder.at("outbox"))
        try outbox.start()
        #expect(outbox.enqueue(delivery("key-hang", to: receiver.url("/do/hang,200"), attemptTimeout: .seconds(1))))
        #expect(await eventually { reports.delivered.count == 1 })
        // The second attempt is answered at once — unless a loaded machine keeps it past the
        // timeout too, which only adds attempts.
        #expect(reports.retrying.first?.reason == "no answer within 1000 ms")
        let attempts = try #require(reports.delivered.first?.attempts)
        #expect(attempts >= 2)
        #expect(receiver.requests(key: "key-hang").count == attempts)
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func aSlowAnswerWithinTheTimeoutIsDeliveredAtOnce() async throws {
        let folder = try TemporaryDirectory("webhook")
        let receiver = try await WebhookReceiver(in: folder)
        let (outbox, reports) = makeOutbox(folder.at("outbox"))
        try outbox.start()
        #expect(outbox.enqueue(delivery("key-slow", to: receiver.url("/do/slow:400"), attemptTimeout: .seconds(60))))
        #expect(await eventually { reports.delivered.count == 1 })
        #expect(reports.delivered.first?.attempts == 1)
        #expect(reports.retrying.isEmpty)
        #expect(receiver.requests(key: "key-slow").count == 1)
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func aResetConnectionIsRetried() async throws {
        let folder = try TemporaryDirectory("webhook")
        let receiver = try await WebhookReceiver(in: folder)
        let (outbox, reports) = makeOutbox(folder.at("outbox"))
        try outbox.start()
        #expect(outbox.enqueue(delivery("key-reset", to: receiver.url("/do/reset,reset,200"))))
        #expect(await eventually { reports.delivered.count == 1 })
        #expect(reports.delivered.first?.attempts == 3)
        #expect(reports.retrying.count == 2)
        #expect(receiver.requests(key: "key-reset").count == 3)
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func aRefusedConnectionIsRetriedUntilGivenUp() async throws {
        let folder = try TemporaryDirectory("webhook")
        let port = try freeLoopbackPort()
        let (outbox, reports) = makeOutbox(folder.at("outbox"))
        try outbox.start()
        #expect(outbox.enqueue(delivery("key-refused", to: "http://127.0.0.1:\(port)/hook", maxAttempts: 3)))
        #expect(await eventually { reports.failed.count == 1 })
        let failed = try #require(reports.failed.first)
        #expect(failed.attempts == 3)
        #expect(failed.reason.hasPrefix("gave up after 3 attempts: "))
        #expect(reports.retrying.count == 2)
        #expect(outbox.statistics == WebhookStatistics(pending: 0, failed: 1, attempts: 3, retries: 2))
        #expect(try pendingOnDisk(folder.at("outbox")).isEmpty)
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func otherClientErrorsAndRedirectsFailAtOnce() async throws {
        let folder = try TemporaryDirectory("webhook")
        let receiver = try await WebhookReceiver(in: folder)
        let (outbox, reports) = makeOutbox(folder.at("outbox"))
        try outbox.start()
        #expect(outbox.enqueue(delivery("key-404", to: receiver.url("/do/404,200"))))
        #expect(outbox.enqueue(delivery("key-301", to: receiver.url("/do/301,200"))))
        #expect(await eventually { reports.failed.count == 2 })
        #expect(Set(reports.failed.map(\.reason)) == ["HTTP 404 Not Found", "HTTP 301 Moved Permanently: redirect not followed"])
        #expect(reports.failed.allSatisfy { $0.attempts == 1 })
        #expect(reports.retrying.isEmpty)
        #expect(receiver.requests.count == 2)
        #expect(outbox.statistics == WebhookStatistics(pending: 0, failed: 2, attempts: 2))
        #expect(try pendingOnDisk(folder.at("outbox")).isEmpty)
        await outbox.shutdown(within: .seconds(5))
    }

    @Test func aFullOutboxDropsCountsAndReports() async throws {
        let folder = try TemporaryDirectory("webhook")
        let url = "http://127.0.0.1:\(try freeLoopbackPort())/hook"
        // Long waits between attempts: the three stay stored while the test looks.
        let (outbox, reports) = makeOutbox(folder.at("outbox"), capacity: 3,
                                           backoff: WebhookBackoff(base: .seconds(600), cap: .seconds(600)))
        #expect(!outbox.enqueue(delivery("key-early", to: url)))
        #expect(reports.dropped.map(\.reason) == ["the outbox has not started"])
        try outbox.start()
        let accepted = (0..<5).map { outbox.enqueue(delivery("key-\($0)", to: url)) }
        #expect(accepted == [true, true, true, false, false])
        #expect(reports.dropped.map(\.id) == ["key-early", "key-3", "key-4"])
        #expect(reports.dropped.dropFirst().allSatisfy { $0.reason == "outbox full (3 deliveries)" })
        // What could never be sent is dropped before it is stored.
        var large = delivery("key-large", to: url)
        large.body = [UInt8](repeating: 0x61, count: WebhookOutbox.maximumBodySize + 1)
        #expect(!outbox.enqueue(large))
        #expect(!outbox.enqueue(delivery("key-ftp", to: "ftp://127.0.0.1/hook")))
        #expect(!outbox.enqueue(delivery("key-header", to: url, headers: [WebhookHeader(name: "X-Bad", value: "a\r\nb")])))
        #expect(reports.dropped.count == 6)
        #expect(outbox.statistics.dropped == 6)
        #expect(outbox.statistics.pending == 3)
        #expect(try pendingOnDisk(folder.at("outbox")) == ["key-0", "key-1", "key-2"])
        // Private: the folder 0700, each segment 0600.
        #expect(try permissions(folder.at("outbox")) == 0o700)
        let segments = try FileManager.default.contentsOfDirectory(atPath: folder.at("outbox"))
        #expect(!segments.isEmpty)
        for segment in segments { #expect(try permissions(folder.at("outbox/" + segment)) == 0o600) }
        await outbox.shutdown(within: .seconds(5))
        #expect(try pendingOnDisk(folder.at("outbox")) == ["key-0", "key-1", "key-2"])
    }

    @Test func aHungReceiverCostsOnlyItsOwnSlot() async throws {
        let folder = try TemporaryDirectory("webhook")
        let receiver = try await WebhookReceiver(in: folder)
        let (outbox, reports) = makeOutbox(folder.at("outbox"), concurrency: 2)
        try outbox.start()
        #expect(outbox.enqueue(delivery("key-hung", to: receiver.url("/do/hang"), attemptTimeout: .seconds(3600))))
        #expect(await eventually { receiver.requests(key: "key-hung").count == 1 })
        for index in 0..<5 { #expect(outbox.enqueue(delivery("key-\(index)", to: receiver.url("/ok")))) }
        #expect(await eventually { reports.delivered.count == 5 })
        #expect(outbox.statistics.pending == 1)
        // Shut down mid-attempt: the hung delivery stays on disk for the next life.
        await outbox.shutdown(within: .milliseconds(200))
        #expect(try pendingOnDisk(folder.at("outbox")) == ["key-hung"])
        #expect(reports.failed.isEmpty)
    }
}

/// The permission bits of `path`.
func permissions(_ path: String) throws -> UInt32 {
    var info = stat()
    guard stat(path, &info) == 0 else { throw POSIXError(.ENOENT) }
    return UInt32(info.st_mode) & 0o777
}
