import Foundation
import NIOHTTP1
import Testing
import TestSupport
@testable import WebhookOutbox

/// The pieces without a receiver: the file format, what an answer means, the waits.
@Suite struct StoredDeliveryTests {
    let sample = WebhookDelivery(id: "key-1", rule: "disk-full", runID: "run-7", url: "https://example.test/hook",
                                 method: "PUT", headers: [WebhookHeader(name: "B", value: "2"), WebhookHeader(name: "A", value: "1")],
                                 body: Array(0...255), attemptTimeout: .milliseconds(1500), maxAttempts: 3)

    @Test func aStoredDeliveryReadsBackAsWritten() throws {
        let bytes = try StoredDelivery.encode(sample)
        #expect(try StoredDelivery.decode(bytes) == sample)
        let json = String(decoding: bytes, as: UTF8.self)
        #expect(json.hasPrefix("eventbus-webhook 1 "))
        #expect(json.contains(#""attempt_timeout_ms":1500"#))
    }

    /// A file cut anywhere — what a torn write would leave — is refused, never half-read.
    @Test func everyTruncationIsRefused() throws {
        let bytes = try StoredDelivery.encode(sample)
        for length in 0..<bytes.count {
            #expect(throws: StoredDelivery.Corrupt.self) { try StoredDelivery.decode(Array(bytes.prefix(length))) }
        }
    }

    @Test func everyFlippedByteIsRefused() throws {
        let bytes = try StoredDelivery.encode(sample)
        for index in bytes.indices {
            var damaged = bytes
            damaged[index] ^= 0x04
            #expect(throws: StoredDelivery.Corrupt.self) { try StoredDelivery.decode(damaged) }
        }
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
