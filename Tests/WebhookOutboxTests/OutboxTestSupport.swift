import Foundation
import InMemoryLogging
import Logging
import TestSupport
@testable import WebhookOutbox

/// An outbox on `folder` with short waits between attempts, and the reports it made.
func makeOutbox(_ folder: String, capacity: Int = 100, concurrency: Int = 4, logger: Logger = Logger(label: "test"),
                backoff: WebhookBackoff = WebhookBackoff(base: .milliseconds(10), cap: .milliseconds(100)))
    -> (WebhookOutbox, Collected<[WebhookReport]>) {
    let reports = Collected<[WebhookReport]>([])
    let outbox = WebhookOutbox(directory: folder, capacity: capacity, concurrency: concurrency, logger: logger,
                               backoff: backoff) { report in reports.update { $0.append(report) } }
    return (outbox, reports)
}

func delivery(_ id: String, to url: String, body: String = #"{"event":"test"}"#, headers: [WebhookHeader] = [],
              attemptTimeout: Duration = .seconds(30), maxAttempts: Int = 8) -> WebhookDelivery {
    WebhookDelivery(id: id, rule: "test-rule", runID: "run-\(id)", url: url, headers: headers, body: Array(body.utf8),
                    attemptTimeout: attemptTimeout, maxAttempts: maxAttempts)
}

/// The ids of the deliveries pending in the log in `folder`, in enqueue order (read without
/// changing anything).
func pendingOnDisk(_ folder: String) throws -> [String] {
    try OutboxLog.read(folder).pending.sorted { $0.key < $1.key }.map(\.value.id)
}

/// A logger whose messages the test can read back: swift-log's in-memory handler, at every level.
func recordingLogger() -> (Logger, InMemoryLogHandler) {
    var handler = InMemoryLogHandler()
    handler.logLevel = .trace
    return (Logger(label: "test") { _ in handler }, handler)
}

extension Collected where Value == [WebhookReport] {
    struct Delivered {
        var id: String
        var status: Int
        var attempts: Int
        var responseTail: String
    }

    var delivered: [Delivered] {
        value.compactMap {
            guard case .delivered(let delivery, let status, let attempts, _, let tail) = $0 else { return nil }
            return Delivered(id: delivery.id, status: status, attempts: attempts, responseTail: tail)
        }
    }

    var failed: [(id: String, reason: String, attempts: Int)] {
        value.compactMap {
            guard case .failed(let delivery, let reason, let attempts) = $0 else { return nil }
            return (delivery.id, reason, attempts)
        }
    }

    var retrying: [(id: String, attempt: Int, reason: String, delay: Duration)] {
        value.compactMap {
            guard case .retrying(let delivery, let attempt, let reason, let delay) = $0 else { return nil }
            return (delivery.id, attempt, reason, delay)
        }
    }

    var dropped: [(id: String, reason: String)] {
        value.compactMap {
            guard case .dropped(let delivery, let reason) = $0 else { return nil }
            return (delivery.id, reason)
        }
    }

    var recovered: [Int] {
        value.compactMap {
            guard case .recovered(let count) = $0 else { return nil }
            return count
        }
    }
}
