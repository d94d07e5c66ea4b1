import Glibc
import SystemCalls

/// The few socket calls both sides need: connecting to the runner's socket, writing a whole
/// line. Blocking; the caller owns the descriptor.
public enum UnixStream {
    /// A connected `AF_UNIX` stream socket (close-on-exec), or why not in words.
    public static func connect(to path: String) -> Result<Int32, RuleRunnerError> {
        do {
            return .success(try System.StreamSocket.connect(to: path))
        } catch {
            switch (error.call, error.errno) {
            case ("socket", _): return .failure(RuleRunnerError(.connection, "socket: \(error.reason)"))
            case (_, ENAMETOOLONG): return .failure(RuleRunnerError(.connection, "\(path): the path is too long for a socket"))
            default: return .failure(RuleRunnerError(.connection, "cannot connect to \(path): \(error.reason)"))
            }
        }
    }

    /// Writes all of `bytes`; false when the peer is gone or the write fails. Never raises
    /// SIGPIPE.
    @discardableResult
    public static func write(_ bytes: [UInt8], to fd: Int32) -> Bool {
        (try? bytes.withUnsafeBytes { try System.StreamSocket.sendAll(fd, $0, "fd \(fd)") }) != nil
    }
}
