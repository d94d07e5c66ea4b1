import Glibc
import SystemCalls

/// A client's connection to eventbusd's control socket: blocking reads and writes of lines.
/// Used by the `eventbus` CLI, the tests and the benchmark; one thread at a time.
public final class ControlConnection {
    /// Why a connection could not be made, in words a person can act on.
    public enum ConnectError: Error, CustomStringConvertible {
        /// Nothing at the path: the host is not running (or listens elsewhere).
        case noSocket(path: String)
        /// A socket file nobody accepts on: left behind by a host that is gone.
        case notListening(path: String)
        /// The socket's permissions keep this user out.
        case permissionDenied(path: String)
        case failed(path: String, call: String, errno: Int32)

        public var description: String {
            switch self {
            case .noSocket(let path):
                return "eventbusd is not running (no socket at \(path))"
            case .notListening(let path):
                return "eventbusd is not running (\(path) does not accept connections)"
            case .permissionDenied(let path):
                return "permission denied on \(path): eventbusd lets root and members of its tail group in (control.tail_group in its config)"
            case .failed(let path, let call, let errno):
                return "cannot connect to \(path): \(call): \(String(cString: strerror(errno)))"
            }
        }
    }

    public let fd: Int32
    public let path: String
    private var lines: LineReader

    /// Connects to the Unix stream socket at `path`.
    public init(path: String) throws(ConnectError) {
        self.path = path
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .failed(path: path, call: "socket", errno: errno) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard path.utf8.count < capacity else {
            close(fd)
            throw .failed(path: path, call: "connect", errno: ENAMETOOLONG)
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if result != 0 {
            let code = errno
            close(fd)
            switch code {
            case ENOENT, ENOTDIR: throw .noSocket(path: path)
            case ECONNREFUSED: throw .notListening(path: path)
            case EACCES, EPERM: throw .permissionDenied(path: path)
            default: throw .failed(path: path, call: "connect", errno: code)
            }
        }
        self.fd = fd
        lines = LineReader(fd: fd, capacity: 256 * 1024)
    }

    deinit { close(fd) }

    /// Closes the sending side only (`shutdown(SHUT_WR)`): the host sees the end of the
    /// requests and keeps writing the stream.
    public func shutdownSending() {
        _ = shutdown(fd, Int32(SHUT_WR))
    }

    /// Makes a read that waits longer than `seconds` fail (with `EAGAIN`) instead of blocking
    /// for good: for callers that must not hang on a host that stopped answering. 0: no limit.
    public func setReceiveTimeout(seconds: Int) {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    /// A failed `send` or `read` on the connection: the OS boundary's one error type.
    public typealias IOError = System.CallError

    /// Sends all of `bytes`.
    public func send(_ bytes: [UInt8]) throws(IOError) {
        var offset = 0
        while offset < bytes.count {
            // MSG_NOSIGNAL: a host that went away is an error to report, not a SIGPIPE that kills.
            offset += try System.call("send", "control socket") {
                bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            }
        }
    }

    /// Sends one request line.
    public func send(_ request: JSON) throws(IOError) {
        try send(JSONWriter.line(request))
    }

    /// Calls `body` with each line received (without its newline), as the bytes arrive, until it
    /// returns false or the host closes the connection. The bytes are only valid during the
    /// call. `beforeWaiting` runs whenever every line received so far has been handled and the
    /// next read may block — the moment to flush what the lines produced. Returns whether it
    /// stopped because `body` said so.
    @discardableResult
    public func forEachLine(beforeWaiting: () throws -> Void = {},
                            _ body: (UnsafeBufferPointer<UInt8>) throws -> Bool) throws -> Bool {
        while true {
            while let keepGoing = try lines.nextBuffered(body) {
                if !keepGoing { return true }
            }
            try beforeWaiting()
            let more: Bool
            more = try lines.fill()
            if !more {
                if let keepGoing = try lines.takeRest(body) { return !keepGoing }  // a last line without a newline
                return false
            }
        }
    }

    /// The next line, or nil at the end of the connection.
    public func readLine() throws -> [UInt8]? {
        var line: [UInt8]?
        try forEachLine { bytes in
            line = Array(bytes)
            return false
        }
        return line
    }

    /// The next line parsed as JSON, or nil at the end of the connection.
    public func readJSON() throws -> JSON? {
        guard let line = try readLine() else { return nil }
        return try line.withUnsafeBufferPointer { try JSON.parse($0) }
    }
}
