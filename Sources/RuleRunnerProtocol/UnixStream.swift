import Glibc

/// The few socket calls both sides need: connecting to the runner's socket, writing a whole
/// line. Blocking; the caller owns the descriptor.
public enum UnixStream {
    /// A connected `AF_UNIX` stream socket (close-on-exec), or why not in words.
    public static func connect(to path: String) -> Result<Int32, RuleRunnerError> {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return .failure(RuleRunnerError(.connection, "socket: \(String(cString: strerror(errno)))")) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard path.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            return .failure(RuleRunnerError(.connection, "\(path): the path is too long for a socket"))
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path.utf8)
            raw[path.utf8.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let code = errno
            close(fd)
            return .failure(RuleRunnerError(.connection, "cannot connect to \(path): \(String(cString: strerror(code)))"))
        }
        return .success(fd)
    }

    /// Writes all of `bytes` (retrying short writes and EINTR); false when the peer is gone or
    /// the write fails. Never raises SIGPIPE (`MSG_NOSIGNAL`).
    @discardableResult
    public static func write(_ bytes: [UInt8], to fd: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if sent < 0 {
                if errno == EINTR { continue }
                return false
            }
            offset += sent
        }
        return true
    }
}
