import ControlProtocol
import Foundation
import Logging
import SystemCalls

/// The control socket's listening side: binding the socket file, accepting clients and refusing
/// those over a limit; each admitted one becomes a ``ControlSession`` through
/// ``ControlServer/admit(_:peer:)``.
///
/// ## Limits
/// When the process runs out of descriptors (`EMFILE`, `ENFILE`), the accept loop closes a spare
/// descriptor it keeps for this, accepts the waiting client, refuses it (an `error` line,
/// `too_many_clients`) and takes the spare back — so the listening socket does not stay
/// readable and spin the loop; if even that fails it stops accepting for a moment (backing off
/// up to a second). Either way the log says so at most every ten seconds, with a count. A
/// client that would leave the host fewer than `control.reserved_files` descriptors is refused
/// the same way (``DescriptorBudget``).
///
/// ## Threads
/// ``bind(_:logger:)`` runs on the host's control queue, at start; everything else on the
/// server's ``System.EventLoop``, whose thread alone touches the state below.
final class ControlListener: LoopWatcher, @unchecked Sendable {
    // @unchecked: the loop's thread only (see above).

    private unowned let server: ControlServer
    private var loop: System.EventLoop { server.loop }
    private(set) var fd: Int32
    /// Kept open to be closed when descriptors run out, so one waiting client can be accepted
    /// and refused instead of left in the backlog (which keeps the socket readable).
    private var spare: Int32 = -1
    private var paused = false
    /// Set by ``close()``: the socket is not watched again.
    private var closed = false
    private var backoff: Duration = .milliseconds(50)
    private var exhaustionLog = RateLimitedLog(interval: .seconds(10))
    private var limitLog = RateLimitedLog(interval: .seconds(10))
    /// Admits clients only while the rest of the host keeps descriptors to work with.
    private var budget = DescriptorBudget(limit: System.openFileLimit().soft)

    init(fd: Int32, server: ControlServer) {
        self.fd = fd
        self.server = server
        spare = System.StreamSocket.openSpare()
    }

    func reserve(configured: Int?) -> Int { budget.reserve(configured: configured) }

    /// Binds the socket at `settings.socketPath` with its permissions, replacing a stale socket
    /// left by an eventbusd that is gone.
    static func bind(_ settings: ControlSettings, logger: Logger) throws(ControlServer.StartError) -> Int32 {
        let path = settings.socketPath
        let occupant: System.StreamSocket.Occupant
        do {
            try System.StreamSocket.makeParentDirectory(of: path, group: settings.tailGroup?.id)
            occupant = try System.StreamSocket.occupant(of: path)
        } catch {
            throw .system(error)
        }
        switch occupant {
        case .nothing: break
        case .liveSocket: throw .liveSocket(path)
        case .otherFile: throw .notASocket(path)
        case .staleSocket:
            logger.notice("replacing stale control socket \(path) (left by an eventbusd that is gone)")
        }
        // Bound under a temporary name, given its permissions, then renamed over the path: a
        // client never finds the path missing while a host restarts (it finds the old socket,
        // refusing, then the new one), and never finds a socket it may connect to too early.
        let temporary = path + ".\(getpid()).new"
        System.StreamSocket.unlink(temporary)
        let fd: Int32
        do { fd = try System.StreamSocket.listen(at: temporary) } catch { throw .system(error) }
        do throws(System.CallError) {
            // 0660: connecting needs write permission, so only root and the group get in.
            try System.StreamSocket.setPermissions(of: temporary, mode: 0o660, group: settings.tailGroup?.id ?? settings.postGroup?.id)
            try System.rename(temporary, to: path)
        } catch {
            System.StreamSocket.close(fd)
            System.StreamSocket.unlink(temporary)
            throw .system(error)
        }
        return fd
    }

    /// Stops watching the socket and closes it (and the spare). On the loop.
    func close() {
        closed = true
        loop.remove(fd)
        System.StreamSocket.close(fd)
        if spare >= 0 { System.StreamSocket.close(spare) }
        spare = -1
    }

    func ready(_ events: UInt32) {
        // A bounded number per wake-up, so a flood of connections does not starve the clients.
        for _ in 0..<64 {
            let client: Int32
            do {
                guard let accepted = try System.StreamSocket.accept(fd, "control socket") else { return }
                client = accepted
            } catch {
                if error.errno == EMFILE || error.errno == ENFILE || error.errno == ENOBUFS || error.errno == ENOMEM {
                    outOfDescriptors(error)
                } else {
                    server.logger.error("control socket: \(error)")
                }
                return
            }
            backoff = .milliseconds(50)
            let (clients, configured) = server.clientCountAndReserve()
            let reserve = budget.reserve(configured: configured)
            guard budget.admits(clients: clients, reserve: reserve) else {
                server.countRefusalForDescriptors()
                let reason = "eventbusd keeps its last \(reserve) file descriptors for its modules and sources (control.reserved_files) and serves \(clients) client(s); try again later"
                if let summary = exhaustionLog.record() {
                    server.logger.warning("control: refused a connection: \(reason)\(summary)")
                }
                Self.refuse(client, ControlError(.tooManyClients, reason))
                continue
            }
            let peer: System.StreamSocket.Peer
            do {
                peer = try System.StreamSocket.peer(of: client)
            } catch {
                server.logger.error("control socket: cannot read the client's credentials, disconnecting it: \(error)")
                System.StreamSocket.close(client)
                continue
            }
            if case .refused(let reason) = server.admit(client, peer: peer) {
                if let summary = limitLog.record() {
                    server.logger.warning("control: refused a connection from uid \(peer.userID) (pid \(peer.processID)): \(reason)\(summary)")
                }
                Self.refuse(client, ControlError(.tooManyClients, reason))
            }
        }
    }

    /// `accept` failed for want of descriptors. Gives the spare back to take the waiting
    /// client, refuses it, and takes the spare again; when that does not work either, stops
    /// watching the listening socket for a while (50 ms, doubling to 1 s).
    private func outOfDescriptors(_ error: System.CallError) {
        if let summary = exhaustionLog.record() {
            server.logger.error("control socket: out of file descriptors (\(error.reason)); refusing new clients until some are free\(summary)")
        }
        if spare >= 0 {
            System.StreamSocket.close(spare)
            spare = -1
            let client = (try? System.StreamSocket.accept(fd, "control socket")) ?? nil
            if let client {
                server.countRefusalForDescriptors()
                Self.refuse(client, ControlError(.tooManyClients, "eventbusd has run out of file descriptors (\(error.reason)); try again later"))
            }
            spare = System.StreamSocket.openSpare()
            if client != nil && spare >= 0 { return }  // the next wake-up tries again
        }
        guard !paused else { return }
        paused = true
        loop.modify(fd, events: 0)
        let pause = backoff
        backoff = min(backoff * 2, .seconds(1))
        loop.after(pause) { [self] in
            paused = false
            if spare < 0 { spare = System.StreamSocket.openSpare() }
            if !closed && !server.isStopped { loop.modify(fd, events: System.EventLoop.readable) }
        }
    }

    /// One `error` line to a client that is not admitted, then close. Best effort: a new
    /// socket's buffer takes the line without blocking.
    static func refuse(_ fd: Int32, _ refusal: ControlError) {
        let line = JSONWriter.line(refusal.json)
        _ = line.withUnsafeBytes { try? System.StreamSocket.write(fd, $0, "control client") }
        System.StreamSocket.close(fd)
    }
}
