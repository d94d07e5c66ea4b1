/// Why systemd cannot run rules' commands here, with the address tried: the host then runs them
/// as child processes and says why.
public struct TransientUnitError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// PID 1 is not systemd (no `/run/systemd/system`): a container without systemd, a
        /// chroot, another init.
        case notBooted
        /// No connection to systemd could be made at the address tried.
        case noConnection
        /// Connected, but systemd (or polkit) did not answer.
        case noAnswer
        /// systemd would refuse this user: not root, and polkit does not allow it to manage
        /// units (or no polkit runs).
        case notAllowed
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
