import SystemCalls

/// Decides whether a file the host reads (its config) or loads (a module) comes from a trusted
/// place.
///
/// Why: the host runs as root and a module is code it runs; a config names which code. If
/// another user could write the file, or replace it through a writable directory on its way,
/// that user could run code as the host. So, like sshd's `StrictModes`, the file and every
/// directory above it — along the path as given and along the path with symbolic links resolved —
/// must be owned by root or by the host's own user, and not writable by every user. A
/// world-writable directory with the sticky bit (`/tmp`) is accepted: there, only a file's owner
/// may rename or delete it.
package enum FileTrust {
    package enum Problem: Error {
        /// The file does not exist (or a directory on its path does not).
        case missing(System.CallError)
        /// The file exists but may not be trusted; `reason` says why, naming the culprit.
        case untrusted(reason: String)
    }

    /// Checks `path` (absolute) and the directories leading to it.
    package static func check(_ path: String) throws(Problem) {
        let resolved: String
        do { resolved = try System.realPath(path) } catch { throw .missing(error) }
        let candidates = [(resolved, true)] + (ancestors(of: resolved) + ancestors(of: path)).map { ($0, false) }
        var checked = Set<String>()
        for (candidate, isTarget) in candidates where checked.insert(candidate).inserted {
            try checkOne(candidate, isTarget: isTarget)
        }
    }

    private static func checkOne(_ path: String, isTarget: Bool) throws(Problem) {
        let status: System.FileStatus
        do { status = try System.status(of: path) } catch { throw .missing(error) }
        let user = System.effectiveUserID
        let place = isTarget ? path : "its directory \(path)"
        if status.ownerID != 0 && status.ownerID != user {
            throw .untrusted(reason:
                "\(place) is owned by user id \(status.ownerID), which is neither root nor the user eventbusd runs as (\(user))")
        }
        if status.isWorldWritable && !(status.isDirectory && status.isSticky) {
            throw .untrusted(reason:
                "\(place) is writable by every user (mode \(status.permissions)); remove that with chmod o-w")
        }
    }

    /// `/a/b/c` → `/a/b`, `/a`, `/`.
    private static func ancestors(of path: String) -> [String] {
        var result: [String] = []
        var components = path.split(separator: "/", omittingEmptySubsequences: true).dropLast()
        while !components.isEmpty {
            result.append("/" + components.joined(separator: "/"))
            components = components.dropLast()
        }
        result.append("/")
        return result
    }
}
