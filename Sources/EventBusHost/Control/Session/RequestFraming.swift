import ControlProtocol
import Glibc

/// Cuts a client's bytes into request lines: the protocol's framing (one JSON object per line,
/// each at most ``ControlProtocol/maximumLineLength`` bytes), with no socket in sight.
///
/// A line longer than the limit is answered once (`line_too_long`) and skipped up to its
/// newline, however many reads it spans; its bytes are not kept. An idle connection keeps no
/// buffer.
///
/// A value owned by one ``ControlSession``, used on the control loop's thread.
struct RequestFraming {
    /// What the framing found in the bytes.
    enum Line {
        /// A complete line, without its newline: valid during the call only.
        case request(UnsafeBufferPointer<UInt8>)
        /// A line over the limit, reported once and then discarded.
        case tooLong
    }

    private var inbound: [UInt8] = []
    /// The start of an over-long line was reported and dropped; its rest is skipped up to the
    /// next newline.
    private var discardingLongLine = false
    let maximumLineLength: Int

    init(maximumLineLength: Int = ControlProtocol.maximumLineLength) {
        self.maximumLineLength = maximumLineLength
    }

    /// Bytes held for an incomplete line.
    var buffered: Int { inbound.count }

    /// Adds `bytes` and calls `body` with each line they complete, in order, until it returns
    /// false (the session closed: the rest is dropped).
    mutating func append(_ bytes: UnsafeBufferPointer<UInt8>, _ body: (Line) -> Bool) {
        let previous = inbound.count
        inbound.append(contentsOf: bytes)
        var lineStart = 0
        var index = previous
        while let newline = inbound.withUnsafeBufferPointer({ all -> Int? in
            guard index < all.count, let found = memchr(all.baseAddress! + index, 0x0A, all.count - index) else { return nil }
            return UnsafeRawPointer(found) - UnsafeRawPointer(all.baseAddress!)
        }) {
            let goOn: Bool
            if discardingLongLine {
                discardingLongLine = false
                goOn = true
            } else if newline - lineStart > maximumLineLength {
                // A whole long line can arrive in one read, before the incomplete-rest check.
                goOn = body(.tooLong)
            } else {
                goOn = inbound.withUnsafeBufferPointer { all in
                    body(.request(UnsafeBufferPointer(rebasing: all[lineStart..<newline])))
                }
            }
            if !goOn {
                reset()
                return
            }
            lineStart = newline + 1
            index = lineStart
        }
        if lineStart == inbound.count {
            inbound = []  // an idle connection keeps no buffer
        } else {
            inbound.removeFirst(lineStart)
        }
        if inbound.count > maximumLineLength {
            if !discardingLongLine, !body(.tooLong) {
                reset()
                return
            }
            discardingLongLine = true
            inbound = []
        }
    }

    /// Forgets what is buffered (the end of the client's input, or the session's close).
    mutating func reset() {
        inbound = []
        discardingLongLine = false
    }
}
