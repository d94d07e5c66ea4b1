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
/// Each line is written through a ``LineCursor`` into a buffer the encoder keeps, bounded
/// first from the event's string lengths, and then appended to the writer in one copy: the
/// control loop encodes every tailed event, and appending byte by byte to the writer's array
/// cost it more than the rest of its work per event.
///
/// One encoder per client session (it caches the formatted second of the last timestamp, which
/// most events of a burst share, and keeps its line buffer); used only on that session's queue.
struct EventJSON {
    private var cachedSecond = Int.min
    private var cachedPrefix: [UInt8] = []  // "2025-03-05T14:02:11"
    /// Where a line is written before it is appended; as long as the longest bound so far.
    private var line: [UInt8] = []

    /// The most fields sorted by insertion (quadratic, but the cheapest for a few); more are
    /// sorted in n log n.
    static let insertionSortLimit = 16

    /// The line's fixed members, with the largest sequence and monotonic time, the quoted time
    /// and the newline.
    private static let fixedBound = 160
    /// A field's colon and comma, besides its key and value.
    private static let fieldPunctuation = 2
    /// The largest line buffer kept between events.
    private static let keptLineBytes = 256 * 1024

    mutating func event(_ event: Event, into writer: inout JSONWriter) {
        let fields = event.fields
        // The fields are taken out of the dictionary once, into a buffer of their own (on the
        // stack when it fits), sorted as they come and bounded on the way: no array of keys to
        // allocate, no hashing to look each one up again, and one copy of each member (each copy
        // is a retain and a release). By insertion for a handful of fields (most events: fewest
        // comparisons, no merge buffer), by Swift's sort beyond: an insertion sort is quadratic,
        // and a 60 000-field post (under the 1 MiB line limit) held the control loop — every
        // client's — for two seconds per tail.
        withUnsafeTemporaryAllocation(of: (key: String, value: FieldValue).self, capacity: fields.count) { sorted in
            let members = sorted.baseAddress!
            var count = 0
            var bound = Self.fixedBound + LineCursor.stringBound(event.name) + LineCursor.stringBound(event.source)
            let insert = fields.count <= Self.insertionSortLimit
            for member in fields {
                bound += Self.fieldPunctuation + LineCursor.stringBound(member.key)
                if case .string(let text) = member.value { bound += LineCursor.stringBound(text) } else { bound += LineCursor.scalarBound }
                var slot = count
                if insert {
                    while slot > 0, member.key < members[slot - 1].key { slot -= 1 }
                    if slot < count { (members + slot + 1).moveInitialize(from: members + slot, count: count - slot) }
                }
                (members + slot).initialize(to: member)
                count += 1
            }
            if !insert {
                var all = UnsafeMutableBufferPointer(rebasing: sorted[0..<count])
                all.sort { $0.key < $1.key }
            }
            write(event, sorted: UnsafeBufferPointer(rebasing: sorted[0..<count]), bound: bound, into: &writer)
            _ = members.deinitialize(count: count)
        }
        // A huge event's buffer is not kept for the small ones that follow (as the session's
        // output buffer is not).
        if line.count > Self.keptLineBytes { line = [] }
    }

    /// Writes the line of `event`, whose fields are `sorted`, in at most `bound` bytes.
    private mutating func write(_ event: Event, sorted: UnsafeBufferPointer<(key: String, value: FieldValue)>, bound: Int,
                                into writer: inout JSONWriter) {
        if line.count < bound { line = [UInt8](repeating: 0, count: max(bound, 2 * line.count, 1024)) }
        var dates = DateFormatting(cachedSecond: cachedSecond, cachedPrefix: cachedPrefix)
        let time = dates.parts(event.wallTime)
        let timePrefix = dates.cachedPrefix
        let length = line.withUnsafeMutableBufferPointer { buffer -> Int in
            var out = LineCursor(buffer.baseAddress!)
            out.raw(EventLine.start)
            out.unsigned(event.sequence)
            out.raw(EventLine.name)
            out.string(event.name)
            out.raw(EventLine.source)
            out.string(event.source)
            out.raw(EventLine.time)
            Self.write(time, prefix: timePrefix, into: &out)
            out.raw(EventLine.mono)
            out.unsigned(event.monotonicNanoseconds)
            out.raw(EventLine.fields)
            for index in sorted.indices {
                if index > 0 { out.byte(UInt8(ascii: ",")) }
                Self.field(sorted[index].key, sorted[index].value, dates: &dates, into: &out)
            }
            out.raw(EventLine.end)
            return out.count
        }
        cachedSecond = dates.cachedSecond
        cachedPrefix = dates.cachedPrefix
        line.withUnsafeBufferPointer { writer.bytes.append(contentsOf: UnsafeBufferPointer(rebasing: $0[0..<length])) }
    }

    private static func field(_ key: String, _ value: FieldValue, dates: inout DateFormatting, into out: inout LineCursor) {
        out.string(key)
        out.byte(UInt8(ascii: ":"))
        switch value {
        case .string(let text): out.string(text)
        case .int(let number): out.int(number)
        case .double(let number): out.double(number)
        case .bool(let flag): out.bool(flag)
        case .date(let date):
            let time = dates.parts(date)
            write(time, prefix: dates.cachedPrefix, into: &out)
        }
    }

    /// A time as its whole second (formatted once per second) and its microseconds.
    private struct DateFormatting {
        var cachedSecond: Int
        var cachedPrefix: [UInt8]

        mutating func parts(_ date: Date) -> (second: Int, micros: Int) {
            let interval = date.timeIntervalSince1970
            let second = Int(interval.rounded(.down))
            let micros = min(999_999, max(0, Int((interval - Double(second)) * 1_000_000)))
            if second != cachedSecond {
                cachedSecond = second
                cachedPrefix = EventJSON.formatSecond(second)
            }
            return (second, micros)
        }
    }

    /// `"YYYY-MM-DDTHH:MM:SS.ffffffZ"` in UTC, microseconds.
    private static func write(_ time: (second: Int, micros: Int), prefix: [UInt8], into out: inout LineCursor) {
        out.byte(UInt8(ascii: "\""))
        prefix.withUnsafeBufferPointer { out.bytes($0) }
        out.byte(UInt8(ascii: "."))
        out.digits(UInt64(time.micros), 6)
        out.raw("Z\"")
    }

    /// `YYYY-MM-DDTHH:MM:SS` of a second since 1970, in UTC.
    private static func formatSecond(_ second: Int) -> [UInt8] {
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
        return prefix.bytes
    }

    private static func digits(_ value: Int, _ width: Int, _ writer: inout JSONWriter) {
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
