import ControlProtocol
import Glibc

/// Standard input's lines for `post --stdin`, through the same ``LineReader`` as the control
/// connection: no `String` per line, at hundreds of thousands of lines a second.
extension LineReader {
    static func standardInput() -> LineReader { LineReader(fd: STDIN_FILENO, capacity: 1 << 20) }

    /// Calls `body` with the next line (valid during the call only), reading as needed; false at
    /// the end of input. A last line without a newline is a line too.
    mutating func next(_ body: (UnsafeBufferPointer<UInt8>) throws -> Void) throws -> Bool {
        while true {
            if try nextBuffered(body) != nil { return true }
            let more: Bool
            do { more = try fill() } catch {
                throw CommandError("reading standard input: \(String(cString: strerror(error.errno)))")
            }
            if !more { return try takeRest(body) != nil }
        }
    }
}
