import ControlProtocol
import EventBusKit
import Foundation
import Logging
import WebhookOutbox

/// Rules' `webhook:` actions through the durable outbox in `<state_directory>/webhooks`, and the
/// outbox's reports as the rules' records: `action.started` when a request is durably queued,
/// `action.finished` with the HTTP status when it is delivered, `action.failed` when it is
/// dropped (outbox full, a body over 1 MiB…) or given up after its attempts.
///
/// A delivery's id — its `Idempotency-Key`, the same on every attempt and across restarts — is
/// `RULE/RUN/ACTION/TRIGGER_SEQ`: unique (a run's id names the host life), and enough to record a
/// delivery that a later life of the host completes.
final class RuleWebhooks: RuleWebhookSink, @unchecked Sendable {
    // @unchecked: `outbox` is set once, by `start`, before any rule can enqueue.

    static let capacity = 10_000
    static let concurrency = 16

    private(set) var outbox: WebhookOutbox!
    private let logger: Logger

    /// Starts the outbox; what an earlier life of the host left in it is delivered now.
    init(directory: String, bus: Bus, logger: Logger) throws(WebhookOutboxError) {
        self.logger = logger
        let recorder = RuleRecorder(bus: bus)
        outbox = WebhookOutbox(directory: directory, capacity: Self.capacity, concurrency: Self.concurrency, logger: logger) { report in
            Self.record(report, recorder: recorder, logger: logger)
        }
        try outbox.start()
    }

    func enqueue(_ action: WebhookAction, step: RuleStep, trigger: RuleTriggerEvents, recorder: RuleRecorder) -> Bool {
        var headers = action.headers.map { WebhookHeader(name: $0.name, value: $0.value.expand(trigger)) }
        if !headers.contains(where: { $0.name.lowercased() == "content-type" }) {
            headers.append(WebhookHeader(name: "Content-Type", value: "application/json"))
        }
        let url = action.url.expand(trigger)
        let delivery = WebhookDelivery(
            id: "\(step.rule)/\(step.run)/\(step.action)/\(step.trigger)", rule: step.rule, runID: step.run, url: url,
            method: action.method, headers: headers, body: action.body.map { Array($0.expand(trigger).utf8) } ?? Self.body(trigger),
            attemptTimeout: action.timeout, maxAttempts: action.attempts)
        guard outbox.enqueue(delivery) else { return false }  // the outbox reported why (`.dropped`)
        recorder.started(step, details: ["url": .string(url), "idempotency_key": .string(delivery.id)])
        return true
    }

    func shutdown(within budget: Duration) async {
        await outbox.shutdown(within: budget)
    }

    /// The triggering event as a JSON object (`eventbus tail --json`'s line); several as an array.
    static func body(_ trigger: RuleTriggerEvents) -> [UInt8] {
        var lines = RuleCommand.standardInput(for: trigger)
        if lines.last == UInt8(ascii: "\n") { lines.removeLast() }
        guard trigger.events.count > 1 else { return lines }
        return Array("[".utf8) + lines.map { $0 == UInt8(ascii: "\n") ? UInt8(ascii: ",") : $0 } + Array("]".utf8)
    }

    /// The step a delivery belongs to, from its id.
    static func step(of delivery: WebhookDelivery) -> RuleStep {
        let parts = delivery.id.split(separator: "/", omittingEmptySubsequences: false)
        return RuleStep(rule: delivery.rule, run: delivery.runID, action: parts.count == 4 ? Int(parts[2]) ?? 0 : 0,
                        kind: "webhook", trigger: parts.count == 4 ? UInt64(parts[3]) ?? 0 : 0)
    }

    private static func record(_ report: WebhookReport, recorder: RuleRecorder, logger: Logger) {
        switch report {
        case .started, .retrying:
            break  // attempts and retries are counted by the outbox; the record keeps the outcome
        case .delivered(let delivery, let status, let attempts, let duration, let responseTail):
            recorder.finished(step(of: delivery), details: ["outcome": "success", "http_status": .int(Int64(status)),
                                                            "attempts": .int(Int64(attempts))],
                              duration: duration, output: responseTail.isEmpty ? [] : [responseTail])
        case .failed(let delivery, let reason, let attempts):
            recorder.failed(step(of: delivery), reason: "\(reason) (after \(attempts) attempt(s))")
        case .dropped(let delivery, let reason):
            recorder.failed(step(of: delivery), reason: "not queued: \(reason)")
        case .recovered(let count):
            logger.info("webhooks: \(count) delivery(ies) left by an earlier life of eventbusd are being delivered")
        }
    }
}
