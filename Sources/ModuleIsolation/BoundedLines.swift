#if canImport(Glibc)
import Glibc
#endif

/// Cuts bytes read from a program into lines of at most ``limit`` bytes — a pure state machine:
/// bytes in, lines out, no descriptor.
///
/// Why bounded: an exec module's output is written by a program the host does not trust to be
/// sane; one line of 100 MB must not become 100 MB of the host's memory. A longer line is
/// skipped up to its newline and reported once, with how long it was, and the lines after it
/// are read as usual.
struct BoundedLines {
    enum Piece: Equatable {
        case line([UInt8])
        /// A line longer than ``limit`` was skipped; `length` counts its bytes.
        case tooLong(length: Int)
    }

    let limit: Int
    private var partial: [UInt8] = []
    /// Bytes of the line being skipped, while one is.
    private var skipping: Int?

    init(limit: Int) {
        self.limit = limit
    }

    /// Takes `bytes` and hands out each line they complete (without its newline).
    mutating func feed(_ bytes: UnsafeRawBufferPointer, _ emit: (Piece) -> Void) {
        guard let base = bytes.baseAddress else { return }
        var start = 0
        while start < bytes.count {
            // memchr: a line skipped is up to 100 MB scanned here.
            let newline = memchr(base + start, 0x0A, bytes.count - start).map { $0 - UnsafeMutableRawPointer(mutating: base) }
            let end = newline ?? bytes.count
            let chunk = UnsafeRawBufferPointer(rebasing: bytes[start..<end])
            if let skipped = skipping {
                skipping = skipped + chunk.count
            } else if partial.count + chunk.count > limit {
                skipping = partial.count + chunk.count
                partial = []
            } else {
                partial.append(contentsOf: chunk)
            }
            guard newline != nil else { return }
            if let skipped = skipping {
                emit(.tooLong(length: skipped))
                skipping = nil
            } else {
                emit(.line(partial))
                partial = []
            }
            start = end + 1
        }
    }

    /// At end of input: the last line, when it had no newline.
    mutating func finish(_ emit: (Piece) -> Void) {
        if let skipped = skipping {
            emit(.tooLong(length: skipped))
        } else if !partial.isEmpty {
            emit(.line(partial))
        }
        partial = []
        skipping = nil
    }
}
