import Foundation

/// The folders, config and command of a real systemd-journald of a test's own, without systemd
/// as PID 1 (docs/platform-facts.md, The journal): in a private mount namespace, `/run/systemd` and `/var/log/journal`
/// become bind mounts of `root/run` and `root/log`. The caller spawns the command as its child
/// and stops it with SIGTERM by pid.
public enum PrivateJournaldLayout {
    /// Prepares `root` and returns the command to spawn. Its native socket is
    /// `root/run/journal/socket`, its syslog socket `root/run/journal/dev-log`, its files land in
    /// `root/log/<machine-id>/`.
    public static func prepare(in root: String) throws -> [String] {
        let files = FileManager.default
        for folder in ["run/journal", "run/journald.conf.d", "log"] {
            try files.createDirectory(atPath: root + "/" + folder, withIntermediateDirectories: true)
        }
        _ = files.createFile(atPath: root + "/run/journal/flushed", contents: nil)
        // No rate limits (tests write bursts); nothing from the kernel or forwarded anywhere, so
        // only what the tests write (and journald's own notices) is in the journal.
        let config = """
            [Journal]
            Storage=persistent
            RateLimitIntervalSec=0
            RateLimitBurst=0
            ReadKMSG=no
            ForwardToSyslog=no
            ForwardToKMsg=no
            ForwardToConsole=no
            ForwardToWall=no
            """
        guard files.createFile(atPath: root + "/run/journald.conf.d/test.conf", contents: Data(config.utf8)) else {
            throw POSIXError(.EIO)
        }
        let script = "mount --bind \(root)/run /run/systemd && mount --bind \(root)/log /var/log/journal"
            + " && exec /lib/systemd/systemd-journald"
        return ["/usr/bin/unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script]
    }
}
