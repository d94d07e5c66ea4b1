import Glibc
import SystemCalls

/// The lines of a file descriptor, read in large chunks into one buffer and handed out as bytes
/// without their newline — no allocation per line, for streams of hundreds of thousands of
/// lines a second. Shared by ``ControlConnection`` (the control socket) and the CLI's
/// `post --stdin` (standard input). One thread.
public struct LineReader {
    public let fd: Int32
    private var buffer: [UInt8]
    private var start = 0
    private var end = 0
    /// The descriptor gave its end of input (or the peer reset the connection).
    public private(set) var isAtEnd = false

    /// Reads `fd` (not closed here) through a buffer of `capacity` bytes, grown for a longer line.
    public init(fd: Int32, capacity: Int) {
        self.fd = fd
        buffer = [UInt8](repeating: 0, count: capacity)
    }

    /// Calls `body` with the next complete line already read, if there is one (valid during the
    /// call only); nil without reading when there is none.
    public mutating func nextBuffered<Result>(_ body: (UnsafeBufferPointer<UInt8>) throws -> Result) rethrows -> Result? {
        guard start < end else { return nil }
        let found = buffer.withUnsafeBufferPointer { all -> Int? in
            guard let found = memchr(all.baseAddress! + start, 0x0A, end - start) else { return nil }
            return UnsafeRawPointer(found) - UnsafeRawPointer(all.baseAddress!)
        }
        guard let newline = found else { return nil }
        defer { start = newline + 1 }
        return try buffer.withUnsafeBufferPointer { try body(UnsafeBufferPointer(rebasing: $0[start..<newline])) }
    }

    /// At the end of input: calls `body` with a last line that had no newline, if there is one.
    public mutating func takeRest<Result>(_ body: (UnsafeBufferPointer<UInt8>) throws -> Result) rethrows -> Result? {
        guard isAtEnd, start < end else { return nil }
        defer { start = end }
        return try buffer.withUnsafeBufferPointer { try body(UnsafeBufferPointer(rebasing: $0[start..<end])) }
    }

    /// Reads more (one `read`, which may block), after moving the unread rest to the front and
    /// growing the buffer for a line longer than it. False at the end of input.
    public mutating func fill() throws(System.CallError) -> Bool {
        if isAtEnd { return false }
        if start > 0 {
            let unread = end - start
            if unread > 0 {
                buffer.withUnsafeMutableBufferPointer { all in _ = memmove(all.baseAddress!, all.baseAddress! + start, unread) }
            }
            start = 0
            end = unread
        }
        if end == buffer.count { buffer.append(contentsOf: [UInt8](repeating: 0, count: buffer.count)) }
        let got: Int
        do {
            got = try buffer.withUnsafeMutableBytes { raw in
                Result { () throws(System.CallError) in try System.read(fd, into: UnsafeMutableRawBufferPointer(rebasing: raw[end...]), path: "fd \(fd)") }
            }.get()
        } catch where error.errno == ECONNRESET {
            isAtEnd = true
            return false
        }
        if got == 0 {
            isAtEnd = true
            return false
        }
        end += got
        return true
    }
}
