import Glibc
import RuleRunnerProtocol

/// Who is at the other end of the runner's connection, as the kernel recorded it at `connect`
/// (`SO_PEERCRED`): nothing the peer says about itself.
struct PeerCredentials: Equatable {
    var pid: Int32
    var uid: UInt32

    static func of(_ fd: Int32) -> Result<PeerCredentials, RuleRunnerError> {
        // `struct ucred` (pid, uid, gid), which the Glibc module does not export without _GNU_SOURCE.
        struct Credentials { var pid: Int32 = 0; var uid: UInt32 = 0; var gid: UInt32 = 0 }
        var credentials = Credentials()
        var length = socklen_t(MemoryLayout<Credentials>.size)
        guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else {
            return .failure(RuleRunnerError(.connection, "getsockopt(SO_PEERCRED): \(String(cString: strerror(errno)))"))
        }
        return .success(PeerCredentials(pid: credentials.pid, uid: credentials.uid))
    }

    /// Root, or the user eventbusd runs as (by name, looked up now): nobody else may ask for
    /// runs, even should the socket's mode let them connect.
    func refusal(clientUser: String) -> RuleRunnerError? {
        if uid == 0 { return nil }
        if let entry = getpwnam(clientUser), entry.pointee.pw_uid == uid { return nil }
        return RuleRunnerError(.refusedPeer, "uid \(uid) (pid \(pid)) may not ask for runs: only root and \(clientUser) may")
    }
}
