import Glibc
import SystemCalls

/// Whether a control client may watch a path or the journal, judged by the client's *own*
/// access — its uid and groups as the kernel recorded them at `connect` (`SO_PEERCRED`,
/// `SO_PEERGROUPS`) — not by eventbusd's (root's).
///
/// Why: `tail --files PATH` makes eventbusd watch PATH with its own privileges. Without this
/// check, any tail-group member could watch a root-only directory it cannot list and see the
/// names of files appearing in it. So a non-root client needs what `ls` would need: search
/// (x) permission on every directory on the way — both the path as given and the path with
/// its symbolic links resolved — and read (r) permission on the target (and search, for a
/// directory). The journal needs membership of one of `control.journal_groups` (by default
/// `systemd-journal` and `adm`, the groups journald lets read the system journal), or uid 0.
///
/// How: the permission bits, owner and group of each step, evaluated as the kernel does for
/// that uid and those groups (owner class, else group class, else other). POSIX ACLs are not
/// evaluated: a path opened to a user only by an ACL entry is refused (the safe side).
/// Evaluating bits rather than switching the thread's identity (`setfsuid` + `faccessat`)
/// keeps this callable from any thread without touching process credentials.
enum PeerAccess {
    /// A refusal, in words for the client and the log.
    struct Refusal: Error, CustomStringConvertible {
        var description: String
    }

    private enum Need {
        case search, read, list
    }

    /// Checks that `peer` may watch `path` (absolute). Root may watch anything.
    static func checkWatch(_ path: String, by peer: System.StreamSocket.Peer) throws(Refusal) {
        guard peer.userID != 0 else { return }
        guard path.hasPrefix("/") else {
            throw Refusal(description: "\(path): a path to watch must be absolute")
        }
        try walk(path, peer: peer, shownAs: path)
        // The walk above succeeded, so resolving the path tells the client nothing it could
        // not find out itself; the resolved path must be reachable too (a symbolic link does
        // not lend access to where it points).
        let resolved = (try? System.realPath(path)) ?? path
        if resolved != path { try walk(resolved, peer: peer, shownAs: path) }
    }

    /// Whether `peer` could see `path` (search on its directories): the per-event check of a
    /// recursive watch, whose subdirectories may be closed to the client.
    static func mayReach(_ path: String, by peer: System.StreamSocket.Peer) -> Bool {
        guard peer.userID != 0 else { return true }
        let parent = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        do {
            try walk(parent.isEmpty ? "/" : parent, peer: peer, shownAs: path)
            return true
        } catch {
            return false
        }
    }

    /// Checks that `peer` may read the journal: uid 0, or a member of one of `groups` (names;
    /// those that do not exist on this system are skipped). An empty list allows everyone who
    /// may tail.
    static func checkJournal(by peer: System.StreamSocket.Peer, groups: [String]) throws(Refusal) {
        guard peer.userID != 0, !groups.isEmpty else { return }
        for name in groups {
            guard let id = System.groupID(named: name) else { continue }
            if peer.groupID == id || peer.groups.contains(id) { return }
        }
        throw Refusal(description: "uid \(peer.userID) may not read the journal: that needs membership of \(groups.joined(separator: " or ")) (control.journal_groups)")
    }

    /// Search permission on every directory from `/` to `path`'s parent, then read (and
    /// search, for a directory) on `path` itself.
    private static func walk(_ path: String, peer: System.StreamSocket.Peer, shownAs shown: String) throws(Refusal) {
        let components = path.split(separator: "/", omittingEmptySubsequences: true)
        var current = "/"
        try check(current, components.isEmpty ? .list : .search, peer: peer, shown: shown)
        for (index, component) in components.enumerated() {
            let parent = current
            current += (current == "/" ? "" : "/") + component
            let last = index == components.count - 1
            if last, !exists(current) {
                // Not there (yet): watching for it to appear shows what listing the folder
                // would, so that is what it needs.
                try check(parent, .list, peer: peer, shown: shown)
                return
            }
            try check(current, last ? .read : .search, peer: peer, shown: shown)
        }
    }

    private static func exists(_ path: String) -> Bool {
        do {
            _ = try System.status(of: path)
            return true
        } catch {
            return error.errno != ENOENT
        }
    }

    private static func check(_ path: String, _ need: Need, peer: System.StreamSocket.Peer, shown: String) throws(Refusal) {
        let status: System.FileStatus
        do { status = try System.status(of: path) } catch {
            throw Refusal(description: "cannot watch \(shown): \(path): \(error.reason)")
        }
        let mode = status.mode
        let isDirectory = status.isDirectory
        let shift: UInt32
        if status.ownerID == peer.userID {
            shift = 6
        } else if status.groupID == peer.groupID || peer.groups.contains(status.groupID) {
            shift = 3
        } else {
            shift = 0
        }
        let bits = (mode >> shift) & 0o7
        let read: UInt32 = 0o4, search: UInt32 = 0o1
        var wanted: UInt32
        switch need {
        case .search: wanted = search
        case .list: wanted = read | search
        case .read: wanted = isDirectory ? read | search : read
        }
        if bits & wanted != wanted {
            let what = wanted == search ? "search" : wanted == read ? "read" : "read and search"
            throw Refusal(description: "uid \(peer.userID) may not watch \(shown): no \(what) permission on \(path) (eventbusd watches only what the client itself may read)")
        }
    }
}
