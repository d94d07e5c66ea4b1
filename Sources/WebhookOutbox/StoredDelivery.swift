import Foundation

/// The bytes of one delivery's file: a header line, then the delivery as JSON.
///
///     eventbus-webhook 1 <JSON length, decimal> <CRC-32 of the JSON, 8 hex digits>\n
///     {"id":"…","rule":"…",…}
///
/// Why a length and a checksum when files only appear by an atomic rename of a synced file: the
/// rename is atomic only while the file system keeps its promises — a disk that lies about its
/// cache, a restore from a copy taken mid-write, a hand edit — and a file that is not exactly
/// what was written must be seen as such, not half-read. ``decode(_:)`` checks everything and
/// throws; it never traps.
enum StoredDelivery {
    static let magic = "eventbus-webhook 1"

    static func encode(_ delivery: WebhookDelivery) throws -> [UInt8] {
        let json = try JSONEncoder().encode(delivery)
        let crc = String(CRC32.checksum(json), radix: 16)
        let header = "\(magic) \(json.count) \(String(repeating: "0", count: 8 - crc.count))\(crc)\n"
        return Array(header.utf8) + json
    }

    struct Corrupt: Error, CustomStringConvertible {
        var description: String
    }

    static func decode(_ bytes: [UInt8]) throws(Corrupt) -> WebhookDelivery {
        // The header is short: a longer first line is not one.
        guard let newline = bytes.prefix(80).firstIndex(of: UInt8(ascii: "\n")) else {
            throw Corrupt(description: bytes.isEmpty ? "empty" : "no header line")
        }
        let fields = String(decoding: bytes[..<newline], as: UTF8.self).split(separator: " ")
        guard fields.count == 4, "\(fields[0]) \(fields[1])" == magic,
              let length = Int(fields[2]), let crc = UInt32(fields[3], radix: 16) else {
            throw Corrupt(description: "not an outbox header")
        }
        let json = bytes[(newline + 1)...]
        guard json.count == length else {
            throw Corrupt(description: "\(json.count) bytes of JSON where the header says \(length) (torn)")
        }
        guard CRC32.checksum(json) == crc else { throw Corrupt(description: "checksum mismatch") }
        do {
            return try JSONDecoder().decode(WebhookDelivery.self, from: Data(json))
        } catch {
            throw Corrupt(description: "not a delivery: \(error)")
        }
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
