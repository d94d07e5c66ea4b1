import ControlProtocol
import EventBusKit
import Foundation
import Glibc

/// Encodes events as the protocol's `event` lines, straight into a ``JSONWriter``, in the
/// member order ``EventLine`` fixes:
///
///     {"type":"event","seq":42,"name":"user.deploy.done","source":"user",
///      "time":"2025-03-05T14:02:11.123456Z","mono":81234567890,"fields":{"env":"prod"}}
///
/// Fields are written in sorted key order so equal events are equal lines. Field values keep
/// their type: strings, integers, doubles, booleans; a date field becomes an RFC 3339 string.
///
/// One encoder per client session (it caches the formatted second of the last timestamp, which
/// most events of a burst share); used only on that session's queue.
struct EventJSON {
    private var cachedSecond = Int.min
    private var cachedPrefix: [UInt8] = []  // "2025-03-05T14:02:11"

    /// The most fields sorted by insertion (quadratic, but the cheapest for a few); more are
    /// sorted in n log n.
    static let insertionSortLimit = 16

    mutating func event(_ event: Event, into writer: inout JSONWriter) {
        writer.raw(EventLine.start)
        writer.unsigned(event.sequence)
        writer.raw(EventLine.name)
        writer.string(event.name)
        writer.raw(EventLine.source)
        writer.string(event.source)
        writer.raw(EventLine.time)
        time(event.wallTime, into: &writer)
        writer.raw(EventLine.mono)
        writer.unsigned(event.monotonicNanoseconds)
        writer.raw(EventLine.fields)
        let fields = event.fields
        if fields.count == 1, let (key, value) = fields.first {
            field(key, value, into: &writer)
        } else if fields.count > 1 {
            // Sorted in a buffer of their own (on the stack when it fits): no array of keys to
            // allocate and no hashing to look each one up again. By insertion for a handful of
            // fields (most events: fewest comparisons, no merge buffer), by Swift's sort beyond:
            // an insertion sort is quadratic, and a 60 000-field post (under the 1 MiB line
            // limit) held the control loop — every client's — for two seconds per tail.
            withUnsafeTemporaryAllocation(of: (key: String, value: FieldValue).self, capacity: fields.count) { sorted in
                var count = 0
                if fields.count <= Self.insertionSortLimit {
                    for member in fields {
                        var slot = count
                        while slot > 0, member.key < sorted[slot - 1].key { slot -= 1 }
                        if slot < count {
                            (sorted.baseAddress! + slot + 1).moveInitialize(from: sorted.baseAddress! + slot, count: count - slot)
                        }
                        (sorted.baseAddress! + slot).initialize(to: member)
                        count += 1
                    }
                } else {
                    for member in fields {
                        (sorted.baseAddress! + count).initialize(to: member)
                        count += 1
                    }
                    var all = UnsafeMutableBufferPointer(rebasing: sorted[0..<count])
                    all.sort { $0.key < $1.key }
                }
                for index in 0..<count {
                    if index > 0 { writer.byte(UInt8(ascii: ",")) }
                    field(sorted[index].key, sorted[index].value, into: &writer)
                }
                _ = sorted.baseAddress!.deinitialize(count: count)
            }
        }
        writer.raw(EventLine.end)
    }

    private mutating func field(_ key: String, _ value: FieldValue, into writer: inout JSONWriter) {
        writer.string(key)
        writer.byte(UInt8(ascii: ":"))
        switch value {
        case .string(let text): writer.string(text)
        case .int(let number): writer.int(number)
        case .double(let number): writer.double(number)
        case .bool(let flag): writer.bool(flag)
        case .date(let date): time(date, into: &writer)
        }
    }

    /// `"YYYY-MM-DDTHH:MM:SS.ffffffZ"` in UTC, microseconds.
    private mutating func time(_ date: Date, into writer: inout JSONWriter) {
        let interval = date.timeIntervalSince1970
        let second = Int(interval.rounded(.down))
        let micros = min(999_999, max(0, Int((interval - Double(second)) * 1_000_000)))
        if second != cachedSecond {
            cachedSecond = second
            var time = time_t(second)
            var parts = tm()
            gmtime_r(&time, &parts)
            var prefix = JSONWriter(capacity: 20)
            digits(Int(parts.tm_year) + 1900, 4, &prefix)
            prefix.byte(UInt8(ascii: "-"))
            digits(Int(parts.tm_mon) + 1, 2, &prefix)
            prefix.byte(UInt8(ascii: "-"))
            digits(Int(parts.tm_mday), 2, &prefix)
            prefix.byte(UInt8(ascii: "T"))
            digits(Int(parts.tm_hour), 2, &prefix)
            prefix.byte(UInt8(ascii: ":"))
            digits(Int(parts.tm_min), 2, &prefix)
            prefix.byte(UInt8(ascii: ":"))
            digits(Int(parts.tm_sec), 2, &prefix)
            cachedPrefix = prefix.bytes
        }
        writer.byte(UInt8(ascii: "\""))
        writer.bytes.append(contentsOf: cachedPrefix)
        writer.byte(UInt8(ascii: "."))
        digits(micros, 6, &writer)
        writer.raw("Z\"")
    }

    private func digits(_ value: Int, _ width: Int, _ writer: inout JSONWriter) {
        var divisor = 1
        for _ in 1..<width { divisor *= 10 }
        var value = value
        while divisor > 0 {
            writer.byte(UInt8(ascii: "0") &+ UInt8(value / divisor % 10))
            value %= divisor
            divisor /= 10
        }
    }
}
