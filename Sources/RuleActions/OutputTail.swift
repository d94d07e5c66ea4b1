import Foundation

/// The last lines a command wrote, kept in bounded memory whatever it writes: at most `lines`
/// lines of at most ``maximumLineBytes`` bytes each (longer ones are cut, marked with `…`),
/// and a partial last line of at most that many bytes.
///
/// Why bounded: `action.finished` carries the tail on the bus, and a command that writes
/// gigabytes must cost the host no more than the tail it keeps.
public final class OutputTail: @unchecked Sendable {
    // @unchecked: one lock guards the state; appended to from the reading task, read at the end.
    public static let maximumLineBytes = 512

    private let limit: Int
    private let lock = NSLock()
    private var kept: [String] = []
    private var partial: [UInt8] = []
    private var partialCut = false

    public init(lines: Int) {
        self.limit = max(0, lines)
    }

    public func append(_ bytes: UnsafeRawBufferPointer) {
        lock.withLock {
            for byte in bytes {
                if byte == UInt8(ascii: "\n") {
                    finishLine()
                } else if partial.count < Self.maximumLineBytes {
                    partial.append(byte)
                } else {
                    partialCut = true
                }
            }
        }
    }

    private func finishLine() {
        var line = String(decoding: partial, as: UTF8.self)
        if partialCut { line += "…" }
        partial.removeAll(keepingCapacity: true)
        partialCut = false
        guard limit > 0 else { return }
        if kept.count == limit { kept.removeFirst() }
        kept.append(line)
    }

    /// The kept lines, the unfinished last one included.
    public var lines: [String] {
        lock.withLock {
            guard !partial.isEmpty || partialCut else { return kept }
            var lines = kept
            var line = String(decoding: partial, as: UTF8.self)
            if partialCut { line += "…" }
            lines.append(line)
            return Array(lines.suffix(limit))
        }
    }
}
