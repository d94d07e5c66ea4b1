import Logging

/// Listening sockets the service manager opened for eventbusd and passed at start — socket
/// activation, sd_listen_fds(3)'s protocol spoken directly.
///
/// systemd (an `eventbusd.socket` unit, or `systemd-socket-activate`) binds the socket, then
/// starts eventbusd with the sockets as descriptors 3, 4, … and sets `LISTEN_FDS` (how many),
/// `LISTEN_PID` (for whom: a child that inherited the variables must not take them), and
/// optionally `LISTEN_FDNAMES` (colon-separated names, `FileDescriptorName=`). The socket exists
/// before eventbusd runs: clients may connect during a restart, and eventbusd needs no right to
/// create `/run/eventbus`.
///
/// ## Use
/// ``take()`` once at start, before other threads run (it edits the environment); then the
/// control server takes its socket with ``takeListener(named:)`` and owns the descriptor from
/// then on (accepts on it, closes it at shutdown).
public final class SocketActivation: @unchecked Sendable {
    // @unchecked: `sockets` is changed only by `takeListener`, which the host calls from its
    // start-up, one thread at a time.

    /// One inherited descriptor.
    public struct InheritedSocket: Sendable, Equatable {
        public var fileDescriptor: Int32
        /// Its `LISTEN_FDNAMES` entry, if names were passed.
        public var name: String?
        /// Where it is bound (`@name` for the abstract namespace), if it is a Unix socket.
        public var path: String?
        /// A Unix stream socket in the listening state: what a control server can accept on.
        public var isListeningUnixStream: Bool
    }

    /// The descriptors passed, in order (descriptor 3 first). Empty when eventbusd was not
    /// socket-activated.
    public private(set) var sockets: [InheritedSocket]
    /// Why the variables were ignored, when they were present but not for this process or
    /// malformed.
    public let ignoredReason: String?

    /// The first descriptor passed: sd_listen_fds(3)'s `SD_LISTEN_FDS_START`.
    public static let firstDescriptor: Int32 = 3
    public static let variables = ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"]

    /// Interprets the variables for process `processID`. Marks every passed descriptor
    /// close-on-exec, so nothing the host starts inherits the control socket.
    /// `firstDescriptor` is 3 by the protocol; tests pass another, because descriptor 3 of a
    /// test process belongs to someone else.
    init(_ environment: [String: String], processID: Int32, firstDescriptor: Int32 = SocketActivation.firstDescriptor) {
        sockets = []
        guard let countText = environment["LISTEN_FDS"] else {
            ignoredReason = nil
            return
        }
        guard let pidText = environment["LISTEN_PID"], Int32(pidText) == processID else {
            ignoredReason = "LISTEN_PID=\(environment["LISTEN_PID"] ?? "(unset)") is not this process (\(processID))"
            return
        }
        guard let count = Int32(countText), count >= 0, count < 1024 else {
            ignoredReason = "LISTEN_FDS=\(countText) is not a descriptor count"
            return
        }
        let names = environment["LISTEN_FDNAMES"].map { $0.split(separator: ":", omittingEmptySubsequences: false).map(String.init) }
        if let names, names.count != Int(count) {
            ignoredReason = "LISTEN_FDNAMES has \(names.count) name(s) for \(count) descriptor(s)"
            return
        }
        ignoredReason = nil
        for index in 0..<count {
            let fd = firstDescriptor + index
            let description = System.describeSocket(fd)
            try? System.setCloseOnExec(fd)
            sockets.append(InheritedSocket(
                fileDescriptor: fd, name: names?[Int(index)], path: description?.path,
                isListeningUnixStream: description.map { $0.isSocket && $0.isUnix && $0.isStream && $0.isListening } ?? false))
        }
    }

    /// Reads the variables of this process and removes them from its environment, as
    /// sd_listen_fds(3) with `unset_environment` does, so a program the host starts does not
    /// mistake them for its own.
    public static func take() -> SocketActivation {
        var values: [String: String] = [:]
        for name in variables {
            values[name] = System.environment(name)
            System.unsetEnvironment(name)
        }
        return SocketActivation(values, processID: System.processID)
    }

    /// Takes the listening Unix stream socket called `name` — or the only socket passed, when it
    /// has no name of its own (see below). The caller owns the returned socket. Nil when there is none, or it is
    /// not a listening Unix stream socket (``problem(takingListenerNamed:)`` says why).
    public func takeListener(named name: String) -> InheritedSocket? {
        guard let index = candidateIndex(named: name), sockets[index].isListeningUnixStream else { return nil }
        return sockets.remove(at: index)
    }

    /// Why ``takeListener(named:)`` finds nothing, for the log; nil when it would succeed or
    /// nothing was passed at all (not socket-activated is not a problem).
    public func problem(takingListenerNamed name: String) -> String? {
        if let ignoredReason { return "socket activation ignored: \(ignoredReason)" }
        guard !sockets.isEmpty else { return nil }
        guard let index = candidateIndex(named: name) else {
            let passed = sockets.map { "fd \($0.fileDescriptor) \($0.name.map { "'\($0)'" } ?? "(unnamed)")" }
            return "no inherited socket named '\(name)' among \(passed.joined(separator: ", "))"
        }
        let socket = sockets[index]
        return socket.isListeningUnixStream ? nil
            : "inherited fd \(socket.fileDescriptor) is not a listening Unix stream socket"
    }

    private func candidateIndex(named name: String) -> Int? {
        if let index = sockets.firstIndex(where: { $0.name == name }) { return index }
        // A single socket without a name of its own is unambiguous: no LISTEN_FDNAMES, or
        // systemd's default name, the socket unit's (`eventbusd.socket` without
        // `FileDescriptorName=`).
        if sockets.count == 1, sockets[0].name.map({ $0.hasSuffix(".socket") }) ?? true { return 0 }
        return nil
    }
}
