import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging

/// eventbusd's control socket: the Unix stream socket that `eventbus tail`, `post`, `status` and
/// `modules` talk to, with the line protocol of `PROTOCOL.md` (next to this file).
///
/// It owns the *replay ring* — the bus's most recent events, for `since_seq` and `last` — and
/// fans every posted event out to the tailing clients' bounded ``TailFeed``s.
///
/// ## Threads
/// - Fan-out runs on the bus's delivery loop, in one closure subscription to every event: under
///   ``lock`` it appends to the ring and offers the event to each feed whose patterns match
///   (a lock and an append per client; never a write to a socket). Taking the ring and the
///   feed list under one lock is what makes a replay join the live stream with nothing missed
///   and nothing twice.
/// - Accepting runs on ``acceptQueue`` (a Dispatch read source on the listening socket).
/// - Each connection is a ``ControlSession`` with its own serial queue: it reads and answers
///   requests, encodes its feed's events and writes them to its socket. A slow client stalls
///   only its own queue.
/// - ``start(settings:)``, ``apply(_:)`` and ``stop(within:)`` come from ``BusHost``'s control
///   queue.
final class ControlServer: @unchecked Sendable {
    // @unchecked: mutable state is behind `lock`, or touched only on the host's control queue
    // (`listener`, `acceptSource`, `boundPath`, `fanOut`), as noted on each.

    /// What status requests report about the host, read when a client asks.
    struct HostSnapshot {
        var configFile: String
        var modules: [ModuleStatistics]
        /// The NATS bridge's state and counts, when one runs (``HostBridge/status``).
        var bridge: JSON? = nil
    }

    enum StartError: Error, CustomStringConvertible {
        case liveSocket(String)
        case notASocket(String)
        case inheritedSocket(String)
        case system(System.CallError)

        var description: String {
            switch self {
            case .liveSocket(let path):
                return "another eventbusd is listening on \(path); stop it first (or give this one another control.socket)"
            case .notASocket(let path):
                return "\(path) exists and is not a socket; it is left alone — remove it or choose another control.socket"
            case .inheritedSocket(let problem):
                return "the inherited control socket is unusable: \(problem)"
            case .system(let error):
                return "cannot create the control socket: \(error)"
            }
        }
    }

    let bus: Bus
    let logger: Logger
    private let snapshot: @Sendable () -> HostSnapshot
    let startedAt = Date()
    private let startedMonotonic = ContinuousClock.now
    private let acceptQueue = DispatchQueue(label: "eventbus.control.accept")

    private let lock = NSLock()
    // Guarded by `lock`.
    private var settings: ControlSettings
    private var ring: ReplayRing
    private var feeds: [TailFeed] = []
    private var sessions: [ObjectIdentifier: ControlSession] = [:]
    private var nextSessionID = 0
    private var stopped = false

    // The host's control queue only.
    private var listener: Int32 = -1
    private var acceptSource: DispatchSourceRead?
    /// The path this server bound and must remove at stop; nil for an inherited socket.
    private var boundPath: String?
    private var fanOut: AnyCancellable?

    init(bus: Bus, logger: Logger, snapshot: @escaping @Sendable () -> HostSnapshot) {
        self.bus = bus
        self.logger = logger
        self.snapshot = snapshot
        self.settings = ControlSettings()
        self.ring = ReplayRing(capacity: 0)
    }

    // MARK: Lifecycle (the host's control queue)

    /// Binds the configured socket (or takes `inherited`, a listening socket from systemd's
    /// socket activation) and starts accepting. The ring holds every event posted from here on.
    func start(settings: ControlSettings, inherited: Int32? = nil) throws(StartError) {
        lock.withLock {
            self.settings = settings
            ring = ReplayRing(capacity: settings.replayEvents)
        }
        if let inherited {
            do { try System.StreamSocket.makeNonBlocking(inherited) } catch { throw .inheritedSocket("\(error)") }
            listener = inherited
        } else {
            listener = try bind(settings)
            boundPath = settings.socketPath
        }
        fanOut = bus.publisher(for: EventPattern.all).sink { [unowned self] event in self.deliver(event) }
        let source = DispatchSource.makeReadSource(fileDescriptor: listener, queue: acceptQueue)
        source.setEventHandler { [unowned self] in self.acceptWaiting() }
        source.resume()
        acceptSource = source
        let groups = [settings.tailGroup.map { "tail group \($0)" }, settings.postGroup.map { "post group \($0)" }]
            .compactMap { $0 }
        logger.info("control socket \(inherited == nil ? settings.socketPath : "inherited (fd \(inherited!))") ready (\(groups.isEmpty ? "root only" : groups.joined(separator: ", ")), replay \(settings.replayEvents) event(s))")
    }

    private func bind(_ settings: ControlSettings) throws(StartError) -> Int32 {
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
            logger.notice("removing stale control socket \(path) (left by an eventbusd that is gone)")
            System.StreamSocket.unlink(path)
        }
        let fd: Int32
        do { fd = try System.StreamSocket.listen(at: path) } catch { throw .system(error) }
        do {
            // 0660: connecting needs write permission, so only root and the group get in.
            try System.StreamSocket.setPermissions(of: path, mode: 0o660, group: settings.tailGroup?.id ?? settings.postGroup?.id)
        } catch {
            System.StreamSocket.close(fd)
            System.StreamSocket.unlink(path)
            throw .system(error)
        }
        return fd
    }

    /// A reloaded config's control section: groups, client buffer and replay size apply at once
    /// (to requests and subscriptions from now on); a new socket path needs a restart.
    func apply(_ new: ControlSettings) {
        let old = lock.withLock { () -> ControlSettings in
            let old = settings
            settings = new
            settings.socketPath = old.socketPath  // the socket stays where it is until a restart
            if new.replayEvents != old.replayEvents { ring.resize(to: new.replayEvents) }
            return old
        }
        guard old != new else { return }
        if new.socketPath != old.socketPath {
            logger.notice("control.socket changed from \(old.socketPath) to \(new.socketPath); the socket moves when eventbusd restarts")
        }
        if let boundPath, new.tailGroup != old.tailGroup || new.postGroup != old.postGroup {
            do {
                try System.StreamSocket.setPermissions(of: boundPath, mode: 0o660, group: new.tailGroup?.id ?? new.postGroup?.id ?? 0)
            } catch {
                logger.error("cannot give the control socket its new group: \(error)")
            }
        }
        logger.info("control settings applied (tail group: \(new.tailGroup?.name ?? "none"), post group: \(new.postGroup?.name ?? "none"), client buffer \(new.clientBuffer), replay \(new.replayEvents))")
    }

    /// Stops accepting, removes the socket file, ends every session with an `end` line
    /// (reason `shutdown`) and waits up to `timeout` for them to write what they hold.
    func stop(within timeout: Duration) {
        let sessions = lock.withLock { () -> [ControlSession] in
            stopped = true
            return Array(self.sessions.values)
        }
        if let acceptSource {
            let listener = listener
            acceptSource.setCancelHandler { System.StreamSocket.close(listener) }
            acceptSource.cancel()
        }
        acceptSource = nil
        if let boundPath { System.StreamSocket.unlink(boundPath) }
        fanOut?.cancel()
        fanOut = nil
        for session in sessions { session.end(reason: "shutdown") }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline, lock.withLock({ !self.sessions.isEmpty }) {
            Thread.sleep(forTimeInterval: 0.005)
        }
        let stuck = lock.withLock { Array(self.sessions.values) }
        if !stuck.isEmpty {
            logger.warning("\(stuck.count) control client(s) did not take their last lines within \(timeout); disconnected")
            for session in stuck { session.forceClose() }
        }
    }

    // MARK: Connections (accept queue)

    private func acceptWaiting() {
        while true {
            let fd: Int32
            do {
                guard let accepted = try System.StreamSocket.accept(listener) else { return }
                fd = accepted
            } catch {
                // EMFILE and friends: log and let the next readiness event try again.
                logger.error("control socket: \(error)")
                return
            }
            let peer: System.StreamSocket.Peer
            do {
                peer = try System.StreamSocket.peer(of: fd)
            } catch {
                logger.error("control socket: cannot read the client's credentials, disconnecting it: \(error)")
                System.StreamSocket.close(fd)
                continue
            }
            let session: ControlSession? = lock.withLock {
                guard !stopped else { return nil }
                nextSessionID += 1
                let session = ControlSession(id: nextSessionID, fd: fd, peer: peer, server: self)
                sessions[ObjectIdentifier(session)] = session
                return session
            }
            guard let session else {
                System.StreamSocket.close(fd)
                return
            }
            logger.debug("control client \(session.id) connected (uid \(peer.userID), pid \(peer.processID))")
            session.start()
        }
    }

    /// A session closed its socket.
    func remove(_ session: ControlSession) {
        lock.withLock { _ = sessions.removeValue(forKey: ObjectIdentifier(session)) }
        logger.debug("control client \(session.id) disconnected")
    }

    // MARK: Permissions (any thread)

    enum Permission: String {
        case tail, post
    }

    /// Whether `peer` may do `permission`: root always; others when they are in the configured
    /// group, as their primary group or a supplementary one.
    func permits(_ permission: Permission, _ peer: System.StreamSocket.Peer) -> Bool {
        if peer.userID == 0 { return true }
        let group = lock.withLock { permission == .tail ? settings.tailGroup : settings.postGroup }
        guard let group else { return false }
        return peer.groupID == group.id || peer.groups.contains(group.id)
    }

    /// Why `peer` may not do `permission`, in the words the client and the log get.
    func refusal(_ permission: Permission, _ peer: System.StreamSocket.Peer) -> String {
        let group = lock.withLock { permission == .tail ? settings.tailGroup : settings.postGroup }
        let what = permission == .tail ? "tail, status and modules" : "post"
        guard let group else {
            return "only root may \(what) (this eventbusd has no control.\(permission)_group)"
        }
        return "uid \(peer.userID) is neither root nor in group \(group.name), which may \(what)"
    }

    var clientBuffer: Int { lock.withLock { settings.clientBuffer } }

    // MARK: Tailing

    /// The start of a subscription's stream, as the server saw it when the feed joined.
    struct Attachment {
        var oldestSequence: UInt64
        var newestSequence: UInt64
    }

    /// Registers `feed` for live events and gives it its replay — under one lock with the
    /// fan-out, so the replay ends exactly where the live events begin.
    func attach(_ feed: TailFeed, since: UInt64?, last: Int?) -> Attachment {
        lock.withLock {
            var items: [TailFeed.Item] = []
            if let since {
                let lostUpTo = ring.oldestSequence - 1
                if since <= lostUpTo {
                    items.append(.gap(dropped: Int(lostUpTo - since + 1), first: since, last: lostUpTo, reason: .replay))
                }
                items += ring.events(from: since, where: feed.wants).map { .event($0) }
            } else if let last, last > 0 {
                items = ring.last(last, where: feed.wants).map { .event($0) }
            }
            feed.setReplay(items, lastSequence: ring.newestSequence)
            feeds.append(feed)
            return Attachment(oldestSequence: ring.oldestSequence, newestSequence: ring.newestSequence)
        }
    }

    func detach(_ feed: TailFeed) {
        lock.withLock { feeds.removeAll { $0 === feed } }
    }

    /// The fan-out: on the bus's delivery loop, for every posted event.
    private func deliver(_ event: Event) {
        lock.lock()
        ring.append(event)
        for feed in feeds where feed.wants(event) {
            feed.offer(event)
        }
        lock.unlock()
    }

    // MARK: Reports (session queues)

    func status() -> JSON {
        let host = snapshot()
        let bus = bus.statistics
        let (socket, clients, tailing, replay) = lock.withLock {
            (settings.socketPath, sessions.count, feeds.count,
             JSON.object(["capacity": .int(Int64(ring.capacity)), "held": .int(Int64(ring.count)),
                          "oldest_seq": .int(Int64(ring.oldestSequence)), "newest_seq": .int(Int64(ring.newestSequence))]))
        }
        let uptime = ContinuousClock.now - startedMonotonic
        var answer: [String: JSON] = [
            "type": "status",
            "protocol": .int(Int64(ControlProtocol.version)),
            "pid": .int(Int64(getpid())),
            "config": .string(host.configFile),
            "started": .string(startedAt.formatted(.iso8601)),
            "uptime_seconds": .double(uptime.secondsValue),
            "posted": .int(Int64(bus.posted)),
            "subscriptions": .int(Int64(bus.subscriptions)),
            "sources": .array(bus.sources.keys.sorted().map { id in
                .object(["id": .string(id), "subscriptions": .int(Int64(bus.sources[id]!))])
            }),
            "modules": .array(host.modules.map(Self.moduleJSON)),
            "control": .object(["socket": .string(socket), "clients": .int(Int64(clients)),
                                 "tailing": .int(Int64(tailing)), "replay": replay]),
        ]
        if let bridge = host.bridge { answer["bridge"] = bridge }
        return .object(answer)
    }

    func modules() -> JSON {
        .object(["type": "modules", "modules": .array(snapshot().modules.map(Self.moduleJSON))])
    }

    /// Counters only: the bus, and each tailing client's feed.
    func stats() -> JSON {
        let bus = bus.statistics
        let (clients, feeds) = lock.withLock { (sessions.count, self.feeds) }
        return .object([
            "type": "stats",
            "posted": .int(Int64(bus.posted)),
            "subscriptions": .int(Int64(bus.subscriptions)),
            "clients": .int(Int64(clients)),
            "tailing": .array(feeds.sorted { $0.client.id < $1.client.id }.map { feed in
                let statistics = feed.statistics
                return .object([
                    "client": .int(Int64(feed.client.id)), "uid": .int(Int64(feed.client.userID)),
                    "pid": .int(Int64(feed.client.processID)),
                    "delivered": .int(Int64(statistics.delivered)), "dropped": .int(Int64(statistics.dropped)),
                    "queued": .int(Int64(statistics.queued)),
                ])
            }),
        ])
    }

    static func moduleJSON(_ module: ModuleStatistics) -> JSON {
        var object: [String: JSON] = [
            "name": .string(module.name),
            "path": .string(module.path),
            "delivered": .int(Int64(module.delivered)),
            "dropped": .int(Int64(module.dropped)),
            "queued": .int(Int64(module.queued)),
            "errors": .int(Int64(module.errors)),
        ]
        switch module.state {
        case .starting: object["state"] = "starting"
        case .active: object["state"] = "active"
        case .disabled: object["state"] = "disabled"
        case .stopped: object["state"] = "stopped"
        case .failed(let reason):
            object["state"] = "failed"
            object["reason"] = .string(reason)
        }
        if let name = module.reportedName { object["reported_name"] = .string(name) }
        if let version = module.version { object["version"] = .string(version) }
        return .object(object)
    }
}
