import Glibc

extension System.StreamSocket {
    /// A blocking, close-on-exec stream socket connected to the Unix socket at `path`: the
    /// client's side (the CLI's control connection, the rule runner's callers). `ENOENT` when
    /// nothing is there, `ECONNREFUSED` when nobody accepts, `ENAMETOOLONG` when the path does
    /// not fit in `sun_path`.
    public static func connect(to path: String) throws(System.CallError) -> Int32 {
        let fd = try System.call("socket", path) { socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        // Not through System.call: a connect interrupted by a signal goes on being made, and a
        // second connect would fail with EALREADY.
        guard withAddress(path, { Glibc.connect(fd, $0, $1) }) == 0 else {
            let code = errno
            Glibc.close(fd)
            throw System.CallError(call: "connect", path: path, errno: code)
        }
        return fd
    }

    /// `send` of all of `bytes`, blocking, with `MSG_NOSIGNAL`: a peer that went away is an
    /// `EPIPE` to report, not a SIGPIPE that kills the process.
    public static func sendAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, _ what: @autoclosure () -> String) throws(System.CallError) {
        var offset = 0
        while offset < bytes.count {
            offset += try System.call("send", what()) { Glibc.send(fd, bytes.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
        }
    }

    /// Makes a blocking read that waits longer than `limit` fail with `EAGAIN` (`SO_RCVTIMEO`,
    /// to the microsecond); nil: no limit.
    public static func setReceiveTimeout(_ fd: Int32, _ limit: Duration?) throws(System.CallError) {
        let (seconds, attoseconds) = (limit ?? .zero).components
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
        _ = try System.call("setsockopt(SO_RCVTIMEO)", "fd \(fd)") {
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }
    }
}
