import EventBusKit
import Foundation

/// Writes the bytes ``EventFieldCoding``'s `append` functions write — the same layout, byte for
/// byte — through a pointer into storage it owns and keeps, for a thread that encodes one event
/// after another (the NATS bridge's exporter).
///
/// Why not `[UInt8]`: appending each key, tag and value to an array is a generic
/// `append(contentsOf:)` with a uniqueness check and a capacity check per piece — most of what
/// encoding an event cost the exporter thread. Here room is made once per field (the lengths of
/// a native string's UTF-8 are known without reading it) and each piece is a store.
///
/// Not copyable: it owns its storage, which is freed with it. Not thread-safe: one writer per
/// thread.
public struct FieldWriter: ~Copyable {
    private var base: UnsafeMutableRawPointer
    private var capacity: Int
    /// Bytes written since the last ``removeAll()``.
    public private(set) var count = 0

    public init(capacity: Int = 512) {
        self.capacity = max(64, capacity)
        base = .allocate(byteCount: self.capacity, alignment: 8)
    }

    deinit { base.deallocate() }

    /// Forgets what was written, keeping the storage.
    public mutating func removeAll() { count = 0 }

    /// The bytes written, valid only inside `body`.
    public func withUnsafeBytes<Result, Failure: Error>(_ body: (UnsafeRawBufferPointer) throws(Failure) -> Result) throws(Failure) -> Result {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// The bytes written, as an array (a copy).
    public var bytes: [UInt8] { withUnsafeBytes { Array($0) } }

    public mutating func byte(_ value: UInt8) {
        reserve(1)
        put(value)
    }

    /// 8 little-endian bytes, as ``EventFieldCoding/appendFixed(_:to:)``.
    public mutating func fixed(_ value: UInt64) {
        reserve(8)
        putFixed(value)
    }

    /// As ``EventFieldCoding/appendVarint(_:to:)``.
    public mutating func varint(_ value: UInt64) {
        reserve(10)
        putVarint(value)
    }

    /// A varint length and the UTF-8, as ``EventFieldCoding/appendString(_:to:)``.
    public mutating func string(_ text: String) {
        let length = text.utf8.count
        reserve(10 + length)
        putString(text, length: length)
    }

    /// The count and every field, as ``EventFieldCoding/append(_:to:)`` (in the dictionary's
    /// order, as it does).
    public mutating func fields(_ fields: [String: FieldValue]) {
        varint(UInt64(fields.count))
        for (key, value) in fields {
            let keyLength = key.utf8.count
            // A key's length, the key, a tag, then the value: a varint and its bytes, or at
            // most 8.
            switch value {
            case .string(let text):
                let length = text.utf8.count
                reserve(21 + keyLength + length)
                putString(key, length: keyLength)
                put(EventFieldCoding.Tag.string.rawValue)
                putString(text, length: length)
            case .int(let number):
                reserve(19 + keyLength)
                putString(key, length: keyLength)
                put(EventFieldCoding.Tag.int.rawValue)
                putFixed(UInt64(bitPattern: number))
            case .double(let number):
                reserve(19 + keyLength)
                putString(key, length: keyLength)
                put(EventFieldCoding.Tag.double.rawValue)
                putFixed(number.bitPattern)
            case .bool(let flag):
                reserve(12 + keyLength)
                putString(key, length: keyLength)
                put(EventFieldCoding.Tag.bool.rawValue)
                put(flag ? 1 : 0)
            case .date(let date):
                reserve(19 + keyLength)
                putString(key, length: keyLength)
                put(EventFieldCoding.Tag.date.rawValue)
                putFixed(date.timeIntervalSinceReferenceDate.bitPattern)
            }
        }
    }

    // MARK: Stores into room already made

    @inline(__always)
    private mutating func reserve(_ extra: Int) {
        if capacity - count < extra { grow(toHold: extra) }
    }

    private mutating func grow(toHold extra: Int) {
        var newCapacity = capacity * 2
        while newCapacity - count < extra { newCapacity *= 2 }
        let newBase = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 8)
        newBase.copyMemory(from: base, byteCount: count)
        base.deallocate()
        base = newBase
        capacity = newCapacity
    }

    @inline(__always)
    private mutating func put(_ value: UInt8) {
        base.storeBytes(of: value, toByteOffset: count, as: UInt8.self)
        count += 1
    }

    @inline(__always)
    private mutating func putFixed(_ value: UInt64) {
        base.storeBytes(of: value.littleEndian, toByteOffset: count, as: UInt64.self)
        count += 8
    }

    @inline(__always)
    private mutating func putVarint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            put(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        put(UInt8(rest))
    }

    /// `length`: `text.utf8.count`, which the caller made room for (and 10 bytes of varint).
    @inline(__always)
    private mutating func putString(_ text: String, length: Int) {
        putVarint(UInt64(length))
        let copied: Void? = text.utf8.withContiguousStorageIfAvailable { utf8 in
            if let start = utf8.baseAddress { (base + count).copyMemory(from: start, byteCount: length) }
        }
        if copied == nil {
            var offset = count
            for unit in text.utf8 {
                base.storeBytes(of: unit, toByteOffset: offset, as: UInt8.self)
                offset += 1
            }
        }
        count += length
    }
}
