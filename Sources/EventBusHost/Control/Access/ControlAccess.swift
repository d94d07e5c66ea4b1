import Glibc

/// Who may do what on the control socket: root everything; the configured groups `tail`
/// (with `status`, `modules`, `stats`, `listing`, `metrics`) and `post`; `reload` root and the
/// user eventbusd runs as (systemd's `ExecReload=` runs `eventbus reload` as the service's
/// `User=`), never a group.
///
/// A value read from the server's settings when a request is checked, so a reloaded config's
/// groups apply to the next request; used on the control loop's thread.
struct ControlAccess {
    enum Permission: String {
        case tail, post, reload
    }

    var tailGroup: ControlSettings.Group?
    var postGroup: ControlSettings.Group?
    /// The user eventbusd runs as (its effective uid).
    var hostUserID: UInt32 = geteuid()

    /// Whether `peer` may do `permission`: root always; others when they are in the configured
    /// group, as their primary group or a supplementary one.
    func permits(_ permission: Permission, _ peer: System.StreamSocket.Peer) -> Bool {
        if peer.userID == 0 { return true }
        if permission == .reload { return peer.userID == hostUserID }
        guard let group = permission == .tail ? tailGroup : postGroup else { return false }
        return peer.groupID == group.id || peer.groups.contains(group.id)
    }

    /// Why `peer` may not do `permission`, in the words the client and the log get.
    func refusal(_ permission: Permission, _ peer: System.StreamSocket.Peer) -> String {
        if permission == .reload { return "only root and uid \(hostUserID) (eventbusd's own user) may reload" }
        let what = permission == .tail ? "tail, status and modules" : "post"
        guard let group = permission == .tail ? tailGroup : postGroup else {
            return "only root may \(what) (this eventbusd has no control.\(permission)_group)"
        }
        return "uid \(peer.userID) is neither root nor in group \(group.name), which may \(what)"
    }
}
