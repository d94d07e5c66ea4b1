import Glibc

/// The lines of a file descriptor (standard input), read in large chunks and handed out as
/// bytes without their newline — no `String` per line, for `post --stdin` at hundreds of
/// thousands of lines a second. One thread.
struct InputLines {
    private let fd: Int32
    private var buffer = [UInt8](repeating: 0, count: 1 << 20)
    private var start = 0
    private var end = 0
    private var atEnd = false

    init(fd: Int32 = STDIN_FILENO) {
        self.fd = fd
    }

    /// Calls `body` with the next line (valid during the call only); false at the end of input.
    /// A last line without a newline is a line too.
    mutating func next(_ body: (UnsafeBufferPointer<UInt8>) throws -> Void) throws -> Bool {
        while true {
            if start < end {
                let newline = buffer.withUnsafeBufferPointer { all -> Int? in
                    guard let found = memchr(all.baseAddress! + start, 0x0A, end - start) else { return nil }
                    return UnsafeRawPointer(found) - UnsafeRawPointer(all.baseAddress!)
                }
                if let newline {
                    try buffer.withUnsafeBufferPointer { try body(UnsafeBufferPointer(rebasing: $0[start..<newline])) }
                    start = newline + 1
                    return true
                }
                if atEnd {
                    try buffer.withUnsafeBufferPointer { try body(UnsafeBufferPointer(rebasing: $0[start..<end])) }
                    start = end
                    return true
                }
            } else if atEnd {
                return false
            }
            try fill()
        }
    }

    /// Reads more, after moving the unread rest to the front (growing the buffer for a line
    /// longer than it).
    private mutating func fill() throws {
        if start > 0 {
            let unread = end - start
            if unread > 0 {
                buffer.withUnsafeMutableBufferPointer { all in _ = memmove(all.baseAddress!, all.baseAddress! + start, unread) }
            }
            start = 0
            end = unread
        }
        if end == buffer.count { buffer.append(contentsOf: [UInt8](repeating: 0, count: buffer.count)) }
        while true {
            let got = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + end, $0.count - end) }
            if got < 0 {
                if errno == EINTR { continue }
                throw CommandError("reading standard input: \(String(cString: strerror(errno)))")
            }
            if got == 0 { atEnd = true } else { end += got }
            return
        }
    }
}
