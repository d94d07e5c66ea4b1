import Glibc

/// Appends JSON text to a byte buffer, by hand.
///
/// Why by hand: `eventbus tail` streams hundreds of thousands of events a second, and the host
/// encodes each one. `JSONEncoder` goes through `Codable`'s keyed containers and allocates per
/// value; this writes UTF-8 straight into one reused buffer — a string without characters to
/// escape is a single `append(contentsOf:)` — so an event costs a few hundred nanoseconds.
/// Callers write the structure (`{`, `,`, `:`) themselves with ``raw(_:)``.
public struct JSONWriter {
    public var bytes: [UInt8]

    public init(capacity: Int = 256) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    @inline(__always)
    public mutating func raw(_ text: StaticString) {
        bytes.append(contentsOf: UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    @inline(__always)
    public mutating func byte(_ byte: UInt8) {
        bytes.append(byte)
    }

    /// `"key":` — for member names known to need no escaping (the protocol's own).
    @inline(__always)
    public mutating func key(_ name: StaticString) {
        bytes.append(UInt8(ascii: "\""))
        raw(name)
        bytes.append(UInt8(ascii: "\""))
        bytes.append(UInt8(ascii: ":"))
    }

    /// A JSON string (``writeJSONString(_:byte:run:)``).
    public mutating func string(_ value: String) {
        var value = value
        value.withUTF8 { utf8 in string(utf8) }
    }

    public mutating func string(_ utf8: UnsafeBufferPointer<UInt8>) {
        writeJSONString(utf8, byte: { bytes.append($0) }, run: { bytes.append(contentsOf: $0) })
    }

    public mutating func int<T: BinaryInteger>(_ value: T) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        unsigned(UInt64(value.magnitude))
    }

    /// Decimal digits of `value`, written into a small stack buffer back to front.
    public mutating func unsigned(_ value: UInt64) {
        if value < 10 {
            bytes.append(UInt8(ascii: "0") &+ UInt8(value))
            return
        }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var value = value
            var index = 20
            while value > 0 {
                index -= 1
                digits[index] = UInt8(ascii: "0") &+ UInt8(value % 10)
                value /= 10
            }
            bytes.append(contentsOf: UnsafeBufferPointer(rebasing: digits[index..<20]))
        }
    }

    /// The shortest text that reads back as `value` (Swift's own); JSON has no infinity or NaN,
    /// so those become `null`. Integral values keep a `.0`, so a reader sees a double.
    public mutating func double(_ value: Double) {
        guard value.isFinite else {
            raw("null")
            return
        }
        var text = value.description
        text.withUTF8 { bytes.append(contentsOf: $0) }
    }

    public mutating func bool(_ value: Bool) {
        if value { raw("true") } else { raw("false") }
    }

    /// Any ``JSON`` value (objects with their members in sorted order, so output is stable).
    public mutating func value(_ value: JSON) {
        switch value {
        case .null: raw("null")
        case .bool(let flag): bool(flag)
        case .int(let number): int(number)
        case .double(let number): double(number)
        case .string(let text): string(text)
        case .array(let items):
            byte(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { byte(UInt8(ascii: ",")) }
                self.value(item)
            }
            byte(UInt8(ascii: "]"))
        case .object(let members):
            byte(UInt8(ascii: "{"))
            for (index, name) in members.keys.sorted().enumerated() {
                if index > 0 { byte(UInt8(ascii: ",")) }
                string(name)
                byte(UInt8(ascii: ":"))
                self.value(members[name]!)
            }
            byte(UInt8(ascii: "}"))
        }
    }

    /// A whole line: `value` and a newline.
    public static func line(_ value: JSON) -> [UInt8] {
        var writer = JSONWriter()
        writer.value(value)
        writer.byte(0x0A)
        return writer.bytes
    }
}
