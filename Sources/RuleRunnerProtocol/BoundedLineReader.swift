import Glibc
import SystemCalls

/// The lines of a connection, each at most a bound long: a peer that sends a longer one gets
/// ``RuleRunnerError/Code/lineTooLong`` instead of a root process buffering without end. One
/// thread.
public struct BoundedLineReader {
    public let fd: Int32
    public let limit: Int
    private var buffer: [UInt8] = []
    /// Where the search for the next newline resumes: bytes before it hold none.
    private var scanned = 0
    private var atEnd = false

    public init(fd: Int32, limit: Int = RuleRunnerProtocol.maximumLineBytes) {
        self.fd = fd
        self.limit = limit
    }

    /// The next line without its newline; nil at the end of the input (a last line without a
    /// newline is a line). A receive timeout on the socket (`SO_RCVTIMEO`) that passes is
    /// ``RuleRunnerError/Code/noRequest``.
    public mutating func next() -> Result<[UInt8]?, RuleRunnerError> {
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            if let newline = buffer[scanned...].firstIndex(of: UInt8(ascii: "\n")) {
                guard newline <= limit else { return .failure(RuleRunnerError(.lineTooLong, "a line longer than \(limit) bytes")) }
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                scanned = 0
                return .success(line)
            }
            scanned = buffer.count
            if buffer.count > limit {
                return .failure(RuleRunnerError(.lineTooLong, "a line longer than \(limit) bytes"))
            }
            if atEnd {
                guard !buffer.isEmpty else { return .success(nil) }
                defer { buffer = []; scanned = 0 }
                return .success(buffer)
            }
            let got = chunk.withUnsafeMutableBytes { raw in Result { () throws(System.CallError) in try System.read(fd, into: raw) } }
            switch got {
            case .success(0): atEnd = true
            case .success(let count): buffer.append(contentsOf: chunk[..<count])
            case .failure(let error) where error.errno == EAGAIN: return .failure(RuleRunnerError(.noRequest, "nothing was sent in time"))
            case .failure(let error) where error.errno == ECONNRESET: atEnd = true
            case .failure(let error): return .failure(RuleRunnerError(.connection, "read: \(error.reason)"))
            }
        }
    }
}
