import AsyncHTTPClient
import Foundation
import NIOHTTP1

/// What one attempt's answer or error means for its delivery.
///
/// - 2xx: delivered.
/// - 408, 429 and 5xx: retried, after at least the `Retry-After` the answer carries (seconds or
///   an HTTP date).
/// - Any other status — other 4xx (the request itself is wrong: retrying sends the same), 3xx
///   (redirects are not followed: a webhook's POST is not for resending to wherever a receiver
///   points) — fails at once.
/// - Every error is retried: refused, reset, closed early, TLS, and no answer within the
///   attempt's timeout. What retrying could never fix — a URL that is not http(s), a header
///   HTTP cannot carry — ``WebhookOutbox/enqueue(_:)`` refused before anything was stored.
enum AttemptVerdict: Equatable {
    case delivered(status: Int)
    case retry(reason: String, retryAfter: Duration?)
    case fail(reason: String)

    init(status: HTTPResponseStatus, headers: HTTPHeaders, now: Date = Date()) {
        let code = Int(status.code)
        switch code {
        case 200..<300:
            self = .delivered(status: code)
        case 408, 429, 500..<600:
            self = .retry(reason: "HTTP \(code) \(status.reasonPhrase)",
                          retryAfter: headers.first(name: "Retry-After").flatMap { Self.retryAfter($0, now: now) })
        case 300..<400:
            let location = headers.first(name: "Location").map { " to \($0)" } ?? ""
            self = .fail(reason: "HTTP \(code) \(status.reasonPhrase): redirect\(location) not followed")
        default:
            self = .fail(reason: "HTTP \(code) \(status.reasonPhrase)")
        }
    }

    init(error: any Error, timeout: Duration) {
        if let error = error as? HTTPClientError, error == .deadlineExceeded {
            self = .retry(reason: "no answer within \(timeout.milliseconds) ms", retryAfter: nil)
        } else {
            self = .retry(reason: String(describing: error), retryAfter: nil)
        }
    }

    /// A `Retry-After` value: delay-seconds, or an HTTP date (RFC 9110, 10.2.3) — the wait
    /// until it, none when it has passed. Nil when it is neither.
    static func retryAfter(_ value: String, now: Date) -> Duration? {
        let text = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int64(text), seconds >= 0 {
            return .seconds(seconds)
        }
        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.timeZone = TimeZone(identifier: "GMT")
        format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard let date = format.date(from: text) else { return nil }
        return .milliseconds(Int64(max(0, date.timeIntervalSince(now)) * 1000))
    }
}
