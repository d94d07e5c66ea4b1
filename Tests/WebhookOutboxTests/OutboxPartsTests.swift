import Foundation
import Logging
import NIOHTTP1
import Testing
import TestSupport
@testable import WebhookOutbox

/// The pieces without a receiver: the log's records and segments, what an answer means, the waits.
@Suite struct OutboxPartsTests {
    let sample = WebhookDelivery(id: "key-1", rule: "disk-full", runID: "run-7", url: "https://example.test/hook",
                                 method: "PUT", headers: [WebhookHeader(name: "B", value: "2"), WebhookHeader(name: "A", value: "1")],
                                 body: Array(0...255), attemptTimeout: .milliseconds(1500), maxAttempts: 3)

    private func segment() throws -> (bytes: [UInt8], records: [LogRecord], ends: [Int]) {
        let records: [LogRecord] = [.add(sequence: 1, delivery: sample), .done(sequence: 1), .add(sequence: 2, delivery: sample)]
        var bytes: [UInt8] = []
        var ends: [Int] = []
        for record in records {
            bytes += try record.encoded()
            ends.append(bytes.count)
        }
        return (bytes, records, ends)
    }

    @Test func recordsReadBackAsWritten() throws {
        let (bytes, records, _) = try segment()
        let decoded = LogRecord.decode(bytes)
        #expect(decoded.records == records)
        #expect(decoded.damage == nil)
        #expect(String(decoding: bytes, as: UTF8.self).contains(#""attempt_timeout_ms":1500"#))
    }

    /// A segment cut anywhere — what a write cut short leaves — reads as the whole records before
    /// the cut and a torn tail; never more, never a trap.
    @Test func everyCutReadsAsTheWholeRecordsBeforeIt() throws {
        let (bytes, records, ends) = try segment()
        for length in 0..<bytes.count {
            let whole = ends.filter { $0 <= length }.count
            let decoded = LogRecord.decode(Array(bytes.prefix(length)))
            #expect(decoded.records == Array(records.prefix(whole)))
            if length == 0 || ends.contains(length) {
                #expect(decoded.damage == nil)
            } else {
                #expect(decoded.damage?.torn == true)
            }
        }
    }

    /// A flipped byte anywhere stops the reading at the record it is in: the records before it
    /// are read, nothing after it.
    @Test func everyFlippedByteStopsTheReadingAtItsRecord() throws {
        let (bytes, records, ends) = try segment()
        for index in bytes.indices {
            var damaged = bytes
            damaged[index] ^= 0x04
            let decoded = LogRecord.decode(damaged)
            let before = ends.filter { $0 <= index }.count
            #expect(decoded.records == Array(records.prefix(before)))
            #expect(decoded.damage?.offset == (before == 0 ? 0 : ends[before - 1]))
        }
    }

    /// With small segments and one delivery pending while hundreds come and go, the log keeps a
    /// few segments — the pending one is carried forward — and a new life finds just it. After
    /// every append and every done, what is on disk reads back as exactly what is pending (what a
    /// crash at that moment would leave; a done record is in the page cache, which a SIGKILL keeps).
    @Test func theLogStaysSmallWhileOneDeliveryStaysPending() throws {
        let folder = try TemporaryDirectory("webhook")
        let log = try OutboxLog(path: folder.path, logger: Logger(label: "test"), segmentLimit: 4096)
        #expect(try log.recover().deliveries.isEmpty)
        var most = 0
        for sequence in UInt64(1)...500 {
            var delivery = sample
            delivery.id = "key-\(sequence)"
            try log.append(delivery, sequence: sequence)
            #expect(Set(try OutboxLog.read(folder.path).pending.keys) == Set([3, sequence].filter { $0 <= sequence }))
            if sequence != 3 { log.markDone(sequence) }
            #expect(Set(try OutboxLog.read(folder.path).pending.keys) == (sequence >= 3 ? [3] : []))
            most = max(most, try FileManager.default.contentsOfDirectory(atPath: folder.path).count)
        }
        #expect(most <= 3)
        #expect(try pendingOnDisk(folder.path) == ["key-3"])
        log.close()
        let next = try OutboxLog(path: folder.path, logger: Logger(label: "test"), segmentLimit: 4096)
        let recovered = try next.recover()
        #expect(recovered.deliveries.map(\.delivery.id) == ["key-3"])
        #expect(recovered.highestSequence == 500)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).count == 1)
    }

    @Test func statusesMeanDeliveredRetryOrFail() {
        func verdict(_ code: Int, _ headers: [(String, String)] = []) -> AttemptVerdict {
            AttemptVerdict(status: HTTPResponseStatus(statusCode: code), headers: HTTPHeaders(headers))
        }
        #expect(verdict(200) == .delivered(status: 200))
        #expect(verdict(204) == .delivered(status: 204))
        #expect(verdict(500) == .retry(reason: "HTTP 500 Internal Server Error", retryAfter: nil))
        #expect(verdict(503, [("Retry-After", "7")]) == .retry(reason: "HTTP 503 Service Unavailable", retryAfter: .seconds(7)))
        #expect(verdict(408) == .retry(reason: "HTTP 408 Request Timeout", retryAfter: nil))
        #expect(verdict(429, [("Retry-After", "soon")]) == .retry(reason: "HTTP 429 Too Many Requests", retryAfter: nil))
        #expect(verdict(400) == .fail(reason: "HTTP 400 Bad Request"))
        #expect(verdict(410) == .fail(reason: "HTTP 410 Gone"))
        #expect(verdict(302, [("Location", "/elsewhere")]) == .fail(reason: "HTTP 302 Found: redirect to /elsewhere not followed"))
    }

    @Test func retryAfterTakesSecondsOrAnHTTPDate() {
        let now = Date(timeIntervalSince1970: 1_445_412_480)  // Wed, 21 Oct 2015 07:28:00 GMT
        #expect(AttemptVerdict.retryAfter("120", now: now) == .seconds(120))
        #expect(AttemptVerdict.retryAfter("Wed, 21 Oct 2015 07:30:00 GMT", now: now) == .seconds(120))
        #expect(AttemptVerdict.retryAfter("Wed, 21 Oct 2015 07:00:00 GMT", now: now) == .zero)
        #expect(AttemptVerdict.retryAfter("-5", now: now) == nil)
    }

    @Test func backoffIsFullJitterUnderACappedDoubling() {
        let backoff = WebhookBackoff(base: .milliseconds(100), cap: .seconds(1), retryAfterLimit: .seconds(30))
        var generator = SplitMix(seed: 42)
        for attempt in 1...12 {
            let ceiling = min(Duration.seconds(1), .milliseconds(100) * (1 << (attempt - 1)))
            let delays = (0..<200).map { _ in backoff.delay(after: attempt, retryAfter: nil, using: &generator) }
            #expect(delays.allSatisfy { $0 >= .zero && $0 <= ceiling })
            // Spread over the range, not stuck at one end.
            #expect(delays.contains { $0 < ceiling / 2 } && delays.contains { $0 > ceiling / 2 })
        }
        #expect(backoff.delay(after: 1, retryAfter: .seconds(5), using: &generator) == .seconds(5))
        #expect(backoff.delay(after: 1, retryAfter: .seconds(3600), using: &generator) == .seconds(30))
    }
}
