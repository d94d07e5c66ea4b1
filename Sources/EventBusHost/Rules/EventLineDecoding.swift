@_spi(EventBusHost) import EventBusKit
import ControlProtocol
import Foundation
import Glibc

/// An `event` line of the control protocol (``EventJSON`` writes it) read back into an
/// ``Event``: for the rule runner, which gets a run's triggering events from eventbusd as those
/// lines. Strict, since the lines come from another process: every member, of its type, no
/// other; a field a string, integer, double or boolean. A string in exactly the form
/// ``EventJSON`` writes a date in comes back as a date (the line cannot tell it from a posted
/// string of that form, which then fills a template without its fraction of a second).
enum EventLineDecoding {
    struct Problem: Error, Equatable {
        var message: String
    }

    static let members: Set<String> = ["type", "seq", "name", "source", "time", "mono", "fields"]

    static func event(_ line: JSON) -> Result<Event, Problem> {
        guard case .object(let members) = line else { return .failure(Problem(message: "an event is an object, found \(line.kindName)")) }
        if let unknown = members.keys.sorted().first(where: { !Self.members.contains($0) }) {
            return .failure(Problem(message: "unknown member \"\(unknown)\""))
        }
        guard members["type"]?.stringValue == "event" else { return .failure(Problem(message: "\"type\" is not \"event\"")) }
        guard let sequence = members["seq"]?.intValue, sequence >= 0 else { return .failure(Problem(message: "\"seq\" is not a sequence number")) }
        guard let name = members["name"]?.stringValue, (try? EventPattern.validate(eventName: name)) != nil else {
            return .failure(Problem(message: "\"name\" is not an event name"))
        }
        guard let source = members["source"]?.stringValue else { return .failure(Problem(message: "\"source\" is not a string")) }
        guard let timeText = members["time"]?.stringValue, let time = Self.time(timeText) else {
            return .failure(Problem(message: "\"time\" is not a time (YYYY-MM-DDTHH:MM:SS.ffffffZ)"))
        }
        guard let mono = members["mono"]?.intValue, mono >= 0 else { return .failure(Problem(message: "\"mono\" is not a monotonic time")) }
        guard let given = members["fields"]?.objectValue else { return .failure(Problem(message: "\"fields\" is not an object")) }
        var fields: [String: FieldValue] = [:]
        for (key, value) in given {
            switch value {
            // A date field is written as its time (timer ticks' `scheduled` and `fired`, a
            // bridge gap's `from` and `until`): read back as a date, it fills templates as the
            // engine's does.
            case .string(let text): fields[key] = Self.time(text).map(FieldValue.date) ?? .string(text)
            case .int(let number): fields[key] = .int(number)
            case .double(let number): fields[key] = .double(number)
            case .bool(let flag): fields[key] = .bool(flag)
            default: return .failure(Problem(message: "field \"\(key)\" is \(value.kindName), not a string, number or boolean"))
            }
        }
        let event = Event(name: name, source: source, fields: fields, wallTime: time, monotonicNanoseconds: UInt64(mono))
        return .success(event.withSequence(UInt64(sequence)))
    }

    /// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, the one form ``EventJSON`` writes.
    static func time(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count == 27, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
              bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"), bytes[19] == UInt8(ascii: "."),
              bytes[26] == UInt8(ascii: "Z") else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for byte in bytes[range] {
                guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
              let minute = number(14..<16), let second = number(17..<19), let micros = number(20..<26),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        // The middle of the microsecond: written again (EventJSON truncates), it is the same
        // text, whatever the rounding of a double on the way.
        return Date(timeIntervalSince1970: Double(seconds) + (Double(micros) + 0.5) / 1_000_000)
    }
}
