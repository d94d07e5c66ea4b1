import Glibc
import RuleRunnerProtocol
import SystemCalls

/// Who is at the other end of the runner's connection, as the kernel recorded it at `connect`
/// (`SO_PEERCRED`): nothing the peer says about itself.
struct PeerCredentials: Equatable {
    var pid: Int32
    var uid: UInt32

    static func of(_ fd: Int32) -> Result<PeerCredentials, RuleRunnerError> {
        do {
            let peer = try System.StreamSocket.peer(of: fd)
            return .success(PeerCredentials(pid: peer.processID, uid: peer.userID))
        } catch {
            return .failure(RuleRunnerError(.connection, "\(error.call): \(error.reason)"))
        }
    }

    /// Root, or the user eventbusd runs as (by name, looked up now): nobody else may ask for
    /// runs, even should the socket's mode let them connect.
    func refusal(clientUser: String) -> RuleRunnerError? {
        if uid == 0 { return nil }
        if System.user(named: clientUser)?.uid == uid { return nil }
        return RuleRunnerError(.refusedPeer, "uid \(uid) (pid \(pid)) may not ask for runs: only root and \(clientUser) may")
    }
}
