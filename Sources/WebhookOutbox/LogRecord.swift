import Foundation

/// One record of the outbox's log ([OutboxLog](OutboxLog.swift)): a delivery stored, or a
/// delivery done (delivered or given up).
///
///     u32 LE payload length | u32 LE CRC-32 of the payload | payload
///     payload: "A" u64 LE sequence, then the delivery as JSON   (stored)
///              "D" u64 LE sequence                              (done)
///
/// ``decode(_:)`` reads a segment's records up to the first one that is not whole and valid and
/// says why it stopped; it checks every length against the bytes there are and never traps.
enum LogRecord: Equatable {
    case add(sequence: UInt64, delivery: WebhookDelivery)
    case done(sequence: UInt64)

    /// No payload is this large (a 1 MiB body is 1.4 MB of base64): a larger length is damage.
    static let maximumPayload = 16 << 20
    static let headerSize = 8

    func encoded() throws -> [UInt8] {
        var payload: [UInt8]
        switch self {
        case .add(let sequence, let delivery):
            payload = [UInt8(ascii: "A")] + Self.bytes(sequence)
            payload += try JSONEncoder().encode(delivery)
        case .done(let sequence):
            payload = [UInt8(ascii: "D")] + Self.bytes(sequence)
        }
        return Self.bytes(UInt32(payload.count)) + Self.bytes(CRC32.checksum(payload)) + payload
    }

    /// Where and why reading a segment stopped early.
    struct Damage: Equatable {
        var offset: Int
        var reason: String
        /// The bad record runs to the end of the segment: what a write cut short by a crash
        /// leaves (never acknowledged: an append returns only after its sync). Otherwise valid
        /// records may follow it, and the segment is damaged.
        var torn: Bool
    }

    static func decode(_ bytes: [UInt8]) -> (records: [LogRecord], damage: Damage?) {
        var records: [LogRecord] = []
        var offset = 0
        while offset < bytes.count {
            func damage(_ reason: String, extent: Int) -> Damage {
                Damage(offset: offset, reason: reason, torn: offset + extent >= bytes.count)
            }
            guard bytes.count - offset >= headerSize else {
                return (records, damage("a record header cut short", extent: headerSize))
            }
            let length = Int(integer(UInt32.self, bytes, at: offset))
            let checksum = integer(UInt32.self, bytes, at: offset + 4)
            guard length <= maximumPayload, length >= 9 else {
                return (records, damage("a record length of \(length)", extent: headerSize))
            }
            guard bytes.count - offset - headerSize >= length else {
                return (records, damage("a record of \(length) bytes cut short", extent: headerSize + length))
            }
            let payload = bytes[(offset + headerSize)..<(offset + headerSize + length)]
            guard CRC32.checksum(payload) == checksum else {
                return (records, damage("a record whose checksum does not match", extent: headerSize + length))
            }
            let sequence = integer(UInt64.self, bytes, at: payload.startIndex + 1)
            switch payload.first {
            case UInt8(ascii: "A"):
                guard let delivery = try? JSONDecoder().decode(WebhookDelivery.self, from: Data(payload.dropFirst(9))) else {
                    return (records, damage("a stored record that is not a delivery", extent: headerSize + length))
                }
                records.append(.add(sequence: sequence, delivery: delivery))
            case UInt8(ascii: "D") where length == 9:
                records.append(.done(sequence: sequence))
            default:
                return (records, damage("a record of an unknown kind", extent: headerSize + length))
            }
            offset += headerSize + length
        }
        return (records, nil)
    }

    private static func bytes<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        withUnsafeBytes(of: value.littleEndian) { Array($0) }
    }

    /// The little-endian integer at `offset` (the caller checked the bytes are there).
    private static func integer<T: FixedWidthInteger>(_: T.Type, _ bytes: [UInt8], at offset: Int) -> T {
        var value: T = 0
        for index in (0..<MemoryLayout<T>.size).reversed() { value = value << 8 | T(bytes[offset + index]) }
        return value
    }
}

/// CRC-32 (IEEE 802.3, as zlib and gzip compute it), table-driven.
enum CRC32 {
    private static let table: [UInt32] = (0..<256).map { index in
        var value = UInt32(index)
        for _ in 0..<8 { value = value & 1 == 1 ? 0xEDB8_8320 ^ (value >> 1) : value >> 1 }
        return value
    }

    static func checksum(_ bytes: some Sequence<UInt8>) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = table[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return crc ^ 0xFFFF_FFFF
    }
}
