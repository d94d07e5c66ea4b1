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
        case failed(System.CallError)

        public var description: String {
            switch self {
            case .noSocket(let path):
                return "eventbusd is not running (no socket at \(path))"
            case .notListening(let path):
                return "eventbusd is not running (\(path) does not accept connections)"
            case .permissionDenied(let path):
                return "permission denied on \(path): eventbusd lets root and members of its tail group in (control.tail_group in its config)"
            case .failed(let error):
                return "cannot connect to \(error.path): \(error.call): \(error.reason)"
            }
        }
    }

    public let fd: Int32
    public let path: String
    private var lines: LineReader

    /// Connects to the Unix stream socket at `path`.
    public init(path: String) throws(ConnectError) {
        self.path = path
        do { fd = try System.StreamSocket.connect(to: path) } catch {
            guard error.call == "connect" else { throw .failed(error) }
            switch error.errno {
            case ENOENT, ENOTDIR: throw .noSocket(path: path)
            case ECONNREFUSED: throw .notListening(path: path)
            case EACCES, EPERM: throw .permissionDenied(path: path)
            default: throw .failed(error)
            }
        }
        lines = LineReader(fd: fd, capacity: 256 * 1024)
    }

    deinit { System.close(fd) }

    /// Closes the sending side only (`shutdown(SHUT_WR)`): the host sees the end of the
    /// requests and keeps writing the stream.
    public func shutdownSending() {
        try? System.shutdown(fd, .writing)
    }

    /// Makes a read that waits longer than `seconds` fail (with `EAGAIN`) instead of blocking
    /// for good: for callers that must not hang on a host that stopped answering. 0: no limit.
    public func setReceiveTimeout(seconds: Int) {
        try? System.StreamSocket.setReceiveTimeout(fd, seconds == 0 ? nil : .seconds(seconds))
    }

    /// A failed `send` or `read` on the connection: the OS boundary's one error type.
    public typealias IOError = System.CallError

    /// Sends all of `bytes`.
    public func send(_ bytes: [UInt8]) throws(IOError) {
        // A host that went away is an error to report (EPIPE), not a SIGPIPE that kills.
        try bytes.withUnsafeBytes { bytes in
            Result { () throws(IOError) in try System.StreamSocket.sendAll(fd, bytes, "control socket") }
        }.get()
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
