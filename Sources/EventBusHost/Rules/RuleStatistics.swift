import EventBusMetrics
import Foundation

/// One rule's counters and state, for `eventbus rules` and the metrics. Counted on the rule's
/// queue; copied out under its lock.
public struct RuleStatistics: Sendable {
    public enum State: Sendable, Equatable {
        case active
        /// The rule could not be started (its launcher cannot honour it); the reason.
        case failed(String)
    }

    public var name: String
    public var location: String
    public var mode: String
    public var launcher: String
    public var state: State = .active
    /// Triggers that came out of the rule's operators.
    public var fired: UInt64 = 0
    /// Triggers its mode skipped (busy, queue full, superseded, retired).
    public var skipped: UInt64 = 0
    /// Events its mailbox dropped before they reached the rule (announced as `rule.skipped`).
    public var dropped: UInt64 = 0
    /// Runs started, and how their actions ended.
    public var runs: UInt64 = 0
    public var succeeded: UInt64 = 0
    public var failed: UInt64 = 0
    public var timedOut: UInt64 = 0
    public var stopped: UInt64 = 0
    public var running: Int = 0
    public var queued: Int = 0
    /// When the last run ended, and how ("success", "exit 3", "timeout"…).
    public var lastRun: (time: Date, outcome: String)?
    /// How long its runs took, start to end of the last action.
    var durations: DurationHistogram?

    /// Bounds of ``durations``: from a quick `touch` to an hour-long backup.
    static let durationBuckets: [Duration] = [.milliseconds(10), .milliseconds(50), .milliseconds(250), .seconds(1), .seconds(5),
                                              .seconds(30), .seconds(120), .seconds(600), .seconds(3600)]

    /// `eventbus_rule_run_duration_seconds`, one histogram per rule.
    static func durationText(_ rules: [RuleStatistics]) -> String {
        var text = ""
        let histograms = rules.compactMap(\.durations)
        guard !histograms.isEmpty else { return text }
        text += "# HELP eventbus_rule_run_duration_seconds How long the rule's runs took, from their start to the end of their last action.\n"
        text += "# TYPE eventbus_rule_run_duration_seconds histogram\n"
        for histogram in histograms { histogram.emit(into: &text) }
        return text
    }
}
