import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// One thing that happened, as the bus carries it.
///
/// A small concrete value — no `Any` on the hot path — so posting and copying stay cheap: the
/// name and source are usually small inline strings, and the fields share one copy-on-write
/// dictionary. Typed views (`timerTick`, `gap`, …) read the fields back as the source wrote them.
public struct Event: Sendable {
    /// Hierarchical, dot-separated name such as `timer.tick`, `fs.modified` or `user.deploy.done`.
    /// Subscriptions match it with an ``EventPattern``.
    public var name: String
    /// Which source produced the event (`user` for posts by people and modules, `timer:every 5s`…).
    public var source: String
    /// Source-specific values (path, unit, priority, message…).
    public var fields: [String: FieldValue]
    /// Wall-clock time at which the event happened.
    public var wallTime: Date
    /// `CLOCK_MONOTONIC` nanoseconds at which the event happened: immune to clock jumps, comparable
    /// with the journal's monotonic timestamps.
    public var monotonicNanoseconds: UInt64
    /// Bus-wide sequence number, assigned when the event is posted (0 until then, and for
    /// per-subscriber notices such as ``Gap``). Strictly increasing in posting order.
    public internal(set) var sequence: UInt64

    public init(
        name: String,
        source: String = "user",
        fields: [String: FieldValue] = [:],
        wallTime: Date = Date(),
        monotonicNanoseconds: UInt64 = MonotonicClock.now()
    ) {
        self.name = name
        self.source = source
        self.fields = fields
        self.wallTime = wallTime
        self.monotonicNanoseconds = monotonicNanoseconds
        self.sequence = 0
    }

    public subscript(field: String) -> FieldValue? { fields[field] }
}

/// A field value. A closed set of cases rather than `Any`, so events stay `Sendable`, `Hashable`
/// and cheap, and encode to JSON without reflection.
public enum FieldValue: Sendable, Hashable, CustomStringConvertible {
    case string(String)
    case int(Int64)
    case double(Double)
    case bool(Bool)
    case date(Date)

    public var stringValue: String? { if case .string(let v) = self { return v }; return nil }
    public var intValue: Int64? { if case .int(let v) = self { return v }; return nil }
    public var doubleValue: Double? {
        switch self {
        case .double(let v): return v
        case .int(let v): return Double(v)
        default: return nil
        }
    }
    public var boolValue: Bool? { if case .bool(let v) = self { return v }; return nil }
    public var dateValue: Date? { if case .date(let v) = self { return v }; return nil }

    public var description: String {
        switch self {
        case .string(let v): return v
        case .int(let v): return String(v)
        case .double(let v): return String(v)
        case .bool(let v): return String(v)
        case .date(let v): return v.formatted(.iso8601)
        }
    }
}

extension FieldValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

/// `CLOCK_MONOTONIC`, the clock every monotonic time on the bus is read from.
public enum MonotonicClock {
    @inline(__always)
    public static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) &* 1_000_000_000 &+ UInt64(ts.tv_nsec)
    }
}
