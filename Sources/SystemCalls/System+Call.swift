import Glibc

extension System {
    /// Makes one libc call that follows the kernel's convention — `-1` and `errno` on failure —
    /// the one way every caller needs: again while it fails with `EINTR` (a signal arrived before
    /// it did anything, so asking again loses nothing), else its result, or a ``CallError``
    /// naming the call, with `errno` read right after it. The model is SwiftNIO's
    /// `syscall(blocking:)`.
    ///
    /// `path` says what the call was about in the error (a file, "fd 3", "control client"); it is
    /// only evaluated on failure. An `errno` the caller expects (`EAGAIN` on a non-blocking
    /// socket, `EPIPE` from a peer that left) arrives as the error's ``CallError/errno``.
    @inlinable
    public static func call<Result: SignedInteger>(
        _ name: String, _ path: @autoclosure () -> String = "", _ body: () -> Result
    ) throws(CallError) -> Result {
        while true {
            let result = body()
            if result != -1 { return result }
            let code = errno
            if code != EINTR { throw CallError(call: name, path: path(), errno: code) }
        }
    }

    /// `poll(2)`: how many of `descriptors` are ready, after at most `milliseconds` (-1: no
    /// limit). A signal that interrupts the wait is not the caller's business: the wait goes on
    /// for what is left of the timeout, so it neither ends early nor overshoots.
    public static func poll(_ descriptors: inout [pollfd], timeout milliseconds: Int32) throws(CallError) -> Int {
        let deadline = milliseconds < 0 ? nil : ContinuousClock.now + .milliseconds(milliseconds)
        var timeout = milliseconds
        while true {
            let ready = Glibc.poll(&descriptors, nfds_t(descriptors.count), timeout)
            if ready >= 0 { return Int(ready) }
            let code = errno
            guard code == EINTR else { throw CallError(call: "poll", path: "\(descriptors.count) descriptors", errno: code) }
            if let deadline {
                let (seconds, attoseconds) = (deadline - .now).components
                timeout = Int32(clamping: max(0, seconds * 1_000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000))
            }
        }
    }

    /// Writes all of `bytes` to `fd` (`write(2)` until done), or throws the first failure.
    public static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: @autoclosure () -> String = "") throws(CallError) {
        var offset = 0
        while offset < bytes.count {
            offset += try call("write", path()) { Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset) }
        }
    }

    /// Reads `fd` to its end (`read(2)` until it returns 0).
    public static func readToEnd(_ fd: Int32, path: @autoclosure () -> String = "") throws(CallError) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let got = try call("read", path()) { chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) } }
            if got == 0 { return bytes }
            bytes.append(contentsOf: chunk[0..<got])
        }
    }

    /// Sleeps until `nanoseconds` on `CLOCK_MONOTONIC`, however many signals arrive meanwhile.
    public static func sleep(untilMonotonic nanoseconds: UInt64) {
        var deadline = timespec(tv_sec: Int(nanoseconds / 1_000_000_000), tv_nsec: Int(nanoseconds % 1_000_000_000))
        // clock_nanosleep returns its error number rather than setting errno.
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nil) == EINTR {}
    }

    /// Sleeps for `duration` on `CLOCK_MONOTONIC`, however many signals arrive meanwhile: the
    /// short pauses of loops that wait for a condition no descriptor reports (a child ending).
    public static func sleep(for duration: Duration) {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let (seconds, attoseconds) = duration.components
        let nanoseconds = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec) + seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        sleep(untilMonotonic: UInt64(max(0, nanoseconds)))
    }
}
