import Glibc

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

/// An open file read with `pread(2)`; its size is `fstat`'s at open, so a file that shrinks
/// while it is read gives a short read (an error), not a fault. Closed at deinit.
final class ELFFileSource: ELFByteSource {
    let size: UInt64
    private let descriptor: Int32
    private let path: String

    init(path: String) throws(ELFError) {
        self.path = path
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw ELFError(.unreadable, "open: \(String(cString: strerror(errno)))") }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let reason = String(cString: strerror(errno))
            close(descriptor)
            throw ELFError(.unreadable, "fstat: \(reason)")
        }
        self.descriptor = descriptor
        size = UInt64(max(0, info.st_size))
    }

    deinit { close(descriptor) }

    func bytes(at offset: UInt64, count: Int) throws(ELFError) -> [UInt8] {
        guard count > 0 else { return [] }
        var buffer = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let got = buffer.withUnsafeMutableBytes { raw in
                pread(descriptor, raw.baseAddress! + done, count - done, off_t(offset) + off_t(done))
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw ELFError(.unreadable, "read at offset \(offset): \(String(cString: strerror(errno)))")
            }
            if got == 0 {
                throw ELFError(.truncated, "the file ended at byte \(offset + UInt64(done)) while \(count) bytes at offset \(offset) were read (it shrank while it was checked)")
            }
            done += got
        }
        return buffer
    }
}
