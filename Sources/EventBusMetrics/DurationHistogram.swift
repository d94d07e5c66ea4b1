import Synchronization

/// A Prometheus histogram of durations that records with three relaxed atomic additions and no
/// lock: one module's handler durations.
///
/// Why not swift-prometheus's own `Histogram`: it takes a lock and does `Duration` arithmetic
/// per record, which measured at a large share of a cheap handler's delivery
/// (`eventbus-bench metrics`). This one compares integers and adds atomically; scrapes read the
/// counts (a scrape racing a record may see the bucket before the count: Prometheus tolerates a
/// sample that is off by one in flight).
public final class DurationHistogram: Sendable {
    public let name: String
    public let labels: [(String, String)]
    /// Upper bounds in nanoseconds, ascending; the last bucket (+Inf) is implicit.
    private let bounds: [Int64]
    private let buckets: [Count]
    private let sum = Atomic<Int64>(0)
    private let count = Atomic<UInt64>(0)

    private final class Count: Sendable {
        let value = Atomic<UInt64>(0)
    }

    public init(name: String, labels: [(String, String)], buckets: [Duration]) {
        self.name = name
        self.labels = labels
        self.bounds = buckets.map { duration in
            let (seconds, attoseconds) = duration.components
            return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        }
        self.buckets = (0...buckets.count).map { _ in Count() }
    }

    public func recordNanoseconds(_ duration: Int64) {
        var index = 0
        while index < bounds.count && duration > bounds[index] { index += 1 }
        buckets[index].value.wrappingAdd(1, ordering: .relaxed)
        sum.wrappingAdd(duration, ordering: .relaxed)
        count.wrappingAdd(1, ordering: .relaxed)
    }

    /// How many observations were at most each bound, and (last) all of them.
    public func cumulativeCounts() -> [UInt64] {
        var cumulative: UInt64 = 0
        return buckets.map { bucket in
            cumulative &+= bucket.value.load(ordering: .relaxed)
            return cumulative
        }
    }

    /// Appends the histogram's sample lines (cumulative buckets, sum in seconds, count).
    public func emit(into text: inout String) {
        let labelText = labels.map { "\($0.0)=\"\(Self.escape($0.1))\"" }.joined(separator: ",")
        let prefix = labelText.isEmpty ? "" : labelText + ","
        var cumulative: UInt64 = 0
        for (index, bucket) in buckets.enumerated() {
            cumulative &+= bucket.value.load(ordering: .relaxed)
            let bound = index < bounds.count ? "\(Double(bounds[index]) / 1e9)" : "+Inf"
            text += "\(name)_bucket{\(prefix)le=\"\(bound)\"} \(cumulative)\n"
        }
        let braces = labelText.isEmpty ? "" : "{\(labelText)}"
        text += "\(name)_sum\(braces) \(Double(sum.load(ordering: .relaxed)) / 1e9)\n"
        text += "\(name)_count\(braces) \(count.load(ordering: .relaxed))\n"
    }

    static func escape(_ value: String) -> String {
        var escaped = ""
        for character in value {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.append(character)
            }
        }
        return escaped
    }
}
