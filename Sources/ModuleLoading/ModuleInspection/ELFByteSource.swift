/// Bytes of a file, read on demand at offsets the caller has checked against ``size``.
///
/// Reads, never a mapping: a mapped file that is shorter than it claims faults (SIGBUS) on the
/// first page past its end, which is what this inspection exists to prevent.
protocol ELFByteSource {
    /// The file's length in bytes, taken once: every bound is checked against it.
    var size: UInt64 { get }
    /// Exactly `count` bytes at `offset` (the caller guarantees `offset + count <= size`).
    func bytes(at offset: UInt64, count: Int) throws(ELFError) -> [UInt8]
}

/// A file in memory: what the tests hand the reader (crafted and corrupted headers).
struct ELFBuffer: ELFByteSource {
    let contents: [UInt8]
    var size: UInt64 { UInt64(contents.count) }

    init(_ contents: [UInt8]) { self.contents = contents }

    func bytes(at offset: UInt64, count: Int) throws(ELFError) -> [UInt8] {
        guard offset <= UInt64(contents.count), count <= contents.count - Int(offset) else {
            throw ELFError(.truncated, "\(count) bytes at offset \(offset) are past the end of the \(contents.count)-byte file")
        }
        return Array(contents[Int(offset)..<(Int(offset) + count)])
    }
}
