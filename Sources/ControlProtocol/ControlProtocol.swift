import Glibc
import SystemCalls

/// Constants of eventbusd's control protocol, shared by the host and its clients. The protocol
/// itself is described in `PROTOCOL.md` beside this file.
public enum ControlProtocol {
    /// The version the host announces in its `hello` line. It changes only when a change would
    /// break an existing client: new ops, new optional request members and new response members
    /// keep the version (clients ignore members they do not know).
    public static let version = 1

    /// The release of eventbusd and eventbus, for `--version`.
    public static let release = "0.3.0"

    /// What `--version` prints on both binaries after the program's name (`eventbusd 0.3.0
    /// (control protocol 1)`): the release and the protocol it speaks.
    public static let versionLine = "\(release) (control protocol \(version))"

    /// Where eventbusd listens when the config names no socket: `/run/eventbus/control.sock`
    /// when it runs as root, else `$XDG_RUNTIME_DIR/eventbus/control.sock` (the per-user
    /// runtime folder; `/run/user/UID` when the variable is unset).
    public static func defaultSocketPath(userID: UInt32 = UInt32(geteuid()),
                                         runtimeDirectory: String? = environment("XDG_RUNTIME_DIR")) -> String {
        if userID == 0 { return systemSocketPath }
        let base = runtimeDirectory.flatMap { $0.isEmpty ? nil : $0 } ?? "/run/user/\(userID)"
        return base + "/eventbus/control.sock"
    }

    /// Where eventbusd itself listens when nothing names a socket: in `$RUNTIME_DIRECTORY` when
    /// systemd made one for it (`RuntimeDirectory=`), else ``defaultSocketPath(userID:runtimeDirectory:)``.
    public static func hostSocketPath() -> String {
        if let runtime = ServiceDirectories.first(of: environment("RUNTIME_DIRECTORY")) { return runtime + "/control.sock" }
        return defaultSocketPath()
    }

    /// The socket of a system-wide eventbusd (run as root).
    public static let systemSocketPath = "/run/eventbus/control.sock"

    /// Overrides the socket the CLI talks to (as `--socket` does).
    public static let socketEnvironmentVariable = "EVENTBUS_SOCKET"

    /// The socket a client should use when none was named: `$EVENTBUS_SOCKET`; else, for root,
    /// the system socket; else the user's own eventbusd if one has a socket, and otherwise the
    /// system-wide one (which members of its tail group may use).
    public static func clientSocketPath() -> String {
        if let named = environment(socketEnvironmentVariable), !named.isEmpty { return named }
        let own = defaultSocketPath()
        if own == systemSocketPath { return own }
        return (try? System.status(of: own)) != nil ? own : systemSocketPath
    }

    /// Lines longer than this (a request, or anything a client sends) are refused: the host
    /// must not buffer without bound for one client.
    public static let maximumLineLength = 1 << 20

    /// The most events one `post` request may carry in `events`: a batch is handled in one turn
    /// of the host's control loop, so its size bounds how long other clients wait.
    public static let maximumPostBatch = 1024

    public static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
