/// Why systemd cannot run rules' commands here, with the address tried: the host then runs them
/// as child processes and says why.
public struct TransientUnitError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// PID 1 is not systemd (no `/run/systemd/system`): a container without systemd, a
        /// chroot, another init.
        case notBooted
        /// No connection to systemd could be made at the address tried.
        case noConnection
        /// Connected, but systemd did not answer a question about itself.
        case noAnswer
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
