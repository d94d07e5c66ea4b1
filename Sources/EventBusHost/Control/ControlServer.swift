import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import Synchronization

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
/// - Accepting, and every connection (a ``ControlSession``: reading and answering requests,
///   encoding its feed's events, writing them), run on ``loop``: one epoll thread for all
///   clients (see ``ControlLoop`` for why). A slow client stalls nobody: its socket is written
///   when epoll says it takes more.
/// - ``start(settings:inherited:)``, ``apply(_:)``, ``refusePosts()`` and ``stop(within:)`` come
///   from ``BusHost``'s control queue.
///
/// ## Limits
/// Clients are limited in total (`control.max_clients`) and per user (`max_clients_per_user`;
/// root counts only against the total): one more is accepted, told why in an `error` line
/// (`too_many_clients`) and closed. When the process runs out of descriptors (`EMFILE`,
/// `ENFILE`), the accept loop closes a spare descriptor it keeps for this, accepts the waiting
/// client, refuses it the same way and takes the spare back — so the listening socket does not
/// stay readable and spin the loop; if even that fails it stops accepting for a moment
/// (backing off up to a second). Either way the log says so at most every ten seconds, with a
/// count.
final class ControlServer: LoopWatcher, @unchecked Sendable {
    // @unchecked: mutable state is behind `lock` or `postGate`, or touched only on the host's
    // control queue (`boundPath`, `fanOut`) or on the loop (`listener`, `spare`, the back-off),
    // as noted on each.

    /// What status requests report about the host, read when a client asks.
    struct HostSnapshot {
        var configFile: String
        var modules: [ModuleStatistics]
        /// The NATS bridge's state and counts, when one runs (``HostBridge/status``).
        var bridge: JSON? = nil
        /// What a running source says of itself, by source id (a journal watch: following, or
        /// unavailable and why).
        var sourceStates: [String: String] = [:]
    }

    enum StartError: Error, CustomStringConvertible {
        case liveSocket(String)
        case notASocket(String)
        case inheritedSocket(String)
        case system(System.CallError)

        var description: String {
            switch self {
            case .liveSocket(let path):
                return "another eventbusd is listening on \(path); stop it first, or give this one another socket (--socket PATH, or control.socket in its config)"
            case .notASocket(let path):
                return "\(path) exists and is not a socket; it is left alone — remove it or choose another control.socket"
            case .inheritedSocket(let problem):
                return "the inherited control socket is unusable: \(problem)"
            case .system(let error):
                return "cannot create the control socket: \(error); name one eventbusd may create with --socket PATH (or control.socket in the config)"
            }
        }
    }

    let bus: Bus
    let logger: Logger
    private let snapshot: @Sendable () -> HostSnapshot
    /// The host's metrics text, for `metrics` requests (``HostMetrics/render()``).
    let metricsText: @Sendable () -> [UInt8]
    /// Re-reads the config as SIGHUP does and hands the outcome to its callback (any thread);
    /// set by the host's service before clients are accepted. Nil: `reload` is not offered.
    var reloadHandler: (@Sendable (@escaping @Sendable (ReloadOutcome) -> Void) -> Void)? {
        get { lock.withLock { _reloadHandler } }
        set { lock.withLock { _reloadHandler = newValue } }
    }
    private var _reloadHandler: (@Sendable (@escaping @Sendable (ReloadOutcome) -> Void) -> Void)?  // guarded by `lock`
    let startedAt = Date()
    private let startedMonotonic = ContinuousClock.now
    /// The thread every connection runs on; set by ``start(settings:inherited:)``.
    private(set) var loop: ControlLoop!
    /// The loop's read buffer, shared by all sessions (they read one at a time, on the loop).
    var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)

    private let lock = NSLock()
    // Guarded by `lock`.
    private var settings: ControlSettings
    private var ring: ReplayRing
    /// What the ring and closed sessions let go of, for giving it back to the kernel.
    private var heapTrim = HeapTrim()
    private var feeds: [TailFeed] = []
    private var sessions: [ObjectIdentifier: ControlSession] = [:]
    private var clientsByUser: [UInt32: Int] = [:]
    private var nextSessionID = 0
    private var stopped = false
    /// The newest sequence the fan-out has seen: how far the bus's delivery loop has come.
    private var fannedOut: UInt64 = 0
    private var refused = RefusalCounts()

    /// Taken around "may clients still post?" and the post itself, so that once
    /// ``refusePosts()`` returns no client post is acknowledged after it.
    private let postGate = NSLock()
    private var postsRefused = false  // guarded by `postGate`

    // The loop only.
    private var listener: Int32 = -1
    /// Kept open to be closed when descriptors run out, so one waiting client can be accepted
    /// and refused instead of left in the backlog (which keeps the socket readable).
    private var spare: Int32 = -1
    private var acceptPaused = false
    /// Set by ``stopAccepting()``: the listener is not watched again.
    private var acceptingClosed = false
    private var backoff: Duration = .milliseconds(50)
    private var exhaustionLog = RateLimitedLog(interval: .seconds(10))
    /// Admits clients only while the rest of the host keeps descriptors to work with.
    private var budget = DescriptorBudget(limit: 0)
    private var limitLog = RateLimitedLog(interval: .seconds(10))

    // The host's control queue only.
    /// The path this server bound and must remove at stop; nil for an inherited socket.
    private var boundPath: String?
    private var fanOut: AnyCancellable?

    /// Clients refused since start, for `status`.
    struct RefusalCounts {
        var limit = 0
        var descriptors = 0
    }

    init(bus: Bus, logger: Logger, snapshot: @escaping @Sendable () -> HostSnapshot,
         metrics: @escaping @Sendable () -> [UInt8] = { [] }) {
        self.bus = bus
        self.logger = logger
        self.snapshot = snapshot
        self.metricsText = metrics
        self.settings = ControlSettings()
        self.ring = ReplayRing(capacity: 0, byteCapacity: 0)
    }

    // MARK: Lifecycle (the host's control queue)

    /// Binds the configured socket (or takes `inherited`, a listening socket from systemd's
    /// socket activation; `settings.socketPath` then names where it is, for `status`). The ring
    /// holds every event posted from here on; clients are answered after ``startAccepting()``.
    func start(settings: ControlSettings, inherited: Int32? = nil) throws(StartError) {
        lock.withLock {
            self.settings = settings
            ring = ReplayRing(capacity: settings.replayEvents, byteCapacity: settings.replayBytes)
        }
        if let inherited {
            do { try System.StreamSocket.makeNonBlocking(inherited) } catch { throw .inheritedSocket("\(error)") }
            listener = inherited
        } else {
            listener = try bind(settings)
            boundPath = settings.socketPath
        }
        let loop: ControlLoop
        do { loop = try ControlLoop() } catch {
            closeListener()
            throw .system(error)
        }
        self.loop = loop
        spare = System.StreamSocket.openSpare()
        budget = DescriptorBudget(limit: System.openFileLimit().soft)
        // Events posted before the fan-out existed are not waited for at shutdown.
        let postedBefore = bus.statistics.posted
        fanOut = bus.publisher(for: EventPattern.all).sink { [unowned self] event in self.deliver(event) }
        lock.withLock { fannedOut = max(fannedOut, postedBefore) }
        loop.start()
        let limit = System.openFileLimit()
        let reserve = budget.reserve(configured: settings.reservedFiles)
        if settings.maxClients + reserve + 64 > limit.soft {
            logger.notice("control.max_clients is \(settings.maxClients) but eventbusd may open only \(limit.soft) file(s) (RLIMIT_NOFILE); a client that would leave fewer than \(reserve) free for modules and sources (control.reserved_files) is refused")
        }
        let groups = [settings.tailGroup.map { "tail group \($0)" }, settings.postGroup.map { "post group \($0)" }]
            .compactMap { $0 }
        logger.info("control socket \(settings.socketPath)\(inherited == nil ? "" : " (inherited, fd \(inherited!))") bound (\(groups.isEmpty ? "root only" : groups.joined(separator: ", ")), replay \(settings.replayEvents) event(s) / \(ByteSizeText.describe(settings.replayBytes)))")
    }

    /// Starts answering clients. Until then they wait in the socket's backlog: the host calls
    /// it once its modules are active, so the first post of a socket activation (or any post
    /// during a restart) reaches the modules that were configured to see it.
    ///
    /// The listener is added on the loop's thread — the loop runs since ``start(settings:inherited:)``
    /// and its watcher table is that thread's alone — and this waits for the answer.
    func startAccepting() throws(StartError) {
        let outcome = Mutex<System.CallError??>(nil)  // nil: not run yet; .some(nil): added
        let done = DispatchSemaphore(value: 0)
        loop.execute { [self] in
            do throws(System.CallError) {
                try loop.add(listener, events: ControlLoop.readable, watcher: self)
                outcome.withLock { $0 = .some(nil) }
            } catch {
                closeListener()
                outcome.withLock { $0 = .some(error) }
            }
            done.signal()
        }
        done.wait()
        if case .some(.some(let error)) = outcome.withLock({ $0 }) { throw .system(error) }
    }

    private func closeListener() {
        System.StreamSocket.close(listener)
        if let boundPath { System.StreamSocket.unlink(boundPath) }
        listener = -1
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
            guard rename(temporary, path) == 0 else { throw System.CallError(call: "rename", path: path, errno: errno) }
        } catch {
            System.StreamSocket.close(fd)
            System.StreamSocket.unlink(temporary)
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
            if new.replayEvents != old.replayEvents || new.replayBytes != old.replayBytes {
                ring.resize(capacity: new.replayEvents, byteCapacity: new.replayBytes)
            }
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
        logger.info("control settings applied (tail group: \(new.tailGroup?.name ?? "none"), post group: \(new.postGroup?.name ?? "none"), client buffer \(new.clientBuffer) event(s) / \(ByteSizeText.describe(new.clientBufferBytes)), replay \(new.replayEvents) event(s) / \(ByteSizeText.describe(new.replayBytes)))")
    }

    /// The first step of a shutdown: from now on a client's post is answered `shutting_down`.
    /// Returns the newest sequence acknowledged to anyone (client or not) before that: what
    /// ``waitForDelivery(upTo:until:)`` waits for.
    @discardableResult
    func refusePosts() -> UInt64 {
        postGate.withLock { postsRefused = true }
        return bus.statistics.posted
    }

    /// Also a first step of a shutdown: clients that connect from now on stay in the socket's
    /// backlog instead of being greeted and then closed by a host on its way out. With socket
    /// activation the next eventbusd answers them; a bound socket resets them when it closes,
    /// and the CLI tries again.
    func stopAccepting() {
        guard let loop else { return }
        loop.execute { [self] in
            acceptingClosed = true
            loop.remove(listener)
        }
    }

    /// Posts a client's event, unless the host is shutting down (nil). Any thread.
    func post(_ event: Event) -> UInt64? {
        postGate.withLock { () -> UInt64? in
            guard !postsRefused else { return nil }
            let sequence = bus.post(event)
            return sequence > 0 ? sequence : nil
        }
    }

    /// Posts a client's batch in order as one bus batch (contiguous sequence numbers, one wake-up
    /// of the delivery loop) under one hold of the gate; returns the sequence numbers — all of
    /// them, or none when the shutdown has begun refusing (or the bus has finished). Any thread.
    func post(contentsOf events: [Event]) -> [UInt64] {
        postGate.withLock { () -> [UInt64] in
            guard !postsRefused else { return [] }
            return Array(bus.post(contentsOf: events))
        }
    }

    /// Waits until the bus's delivery loop has handed every event up to `sequence` to its
    /// subscribers (the fan-out to tails is one of them), or `deadline` passed. Returns whether
    /// it got there. On the host's control queue.
    @discardableResult
    func waitForDelivery(upTo sequence: UInt64, until deadline: ContinuousClock.Instant) -> Bool {
        guard fanOut != nil else { return true }  // not started (or stopped): nothing to wait for
        while lock.withLock({ fannedOut < sequence }) {
            if ContinuousClock.now >= deadline { return false }
            Thread.sleep(forTimeInterval: 0.001)
        }
        return true
    }

    /// Stops accepting, removes the socket file, and ends every session: each writes what its
    /// feed holds (everything posted until now: the fan-out is drained first), then an `end`
    /// line (reason `shutdown`). A client that has not read it all when `timeout` is nearly up
    /// gets what is left announced in a `gap` line (reason `shutdown`) instead; one that does
    /// not read even that is disconnected, and the log says how many events it lost.
    func stop(within timeout: Duration) {
        guard let loop else { return }  // never started
        let deadline = ContinuousClock.now + timeout
        let posted = refusePosts()
        if !waitForDelivery(upTo: posted, until: deadline) {
            logger.warning("control socket: the bus had not delivered up to event #\(posted) when the shutdown's time was up")
        }
        fanOut?.cancel()
        fanOut = nil
        let sessions = lock.withLock { () -> [ControlSession] in
            stopped = true
            return Array(self.sessions.values)
        }
        if let boundPath { System.StreamSocket.unlink(boundPath) }
        loop.execute { [self] in
            loop.remove(listener)
            System.StreamSocket.close(listener)
            if spare >= 0 { System.StreamSocket.close(spare) }
            for session in sessions { session.end(reason: "shutdown") }
        }
        // Most of the time for writing; the last fifth for the gap notices of slow readers.
        let hurryAt = deadline - timeout / 5
        while ContinuousClock.now < hurryAt, lock.withLock({ !self.sessions.isEmpty }) {
            Thread.sleep(forTimeInterval: 0.005)
        }
        let slow = lock.withLock { Array(self.sessions.values) }
        if !slow.isEmpty {
            let logger = logger
            loop.execute {
                for session in slow {
                    if let given = session.hurry(reason: "shutdown") {
                        logger.warning("control client \(session.id) (uid \(session.peer.userID), pid \(session.peer.processID)) did not read its stream in time: \(given.count) event(s) #\(given.first)-#\(given.last) announced as lost (gap line, reason shutdown)")
                    }
                }
            }
        }
        while ContinuousClock.now < deadline, lock.withLock({ !self.sessions.isEmpty }) {
            Thread.sleep(forTimeInterval: 0.005)
        }
        let stuck = lock.withLock { Array(self.sessions.values) }
        if !stuck.isEmpty {
            let logger = logger
            loop.execute {
                var lost = 0
                for session in stuck { lost += session.forceClose() }
                logger.warning("\(stuck.count) control client(s) did not take their last lines within \(timeout); disconnected, up to \(lost) event(s) unwritten")
            }
        }
        loop.stopAndWait()
    }

    // MARK: Connections (the loop)

    func ready(_ events: UInt32) {
        acceptWaiting()
    }

    private func acceptWaiting() {
        // A bounded number per wake-up, so a flood of connections does not starve the clients.
        for _ in 0..<64 {
            let fd: Int32
            do {
                guard let accepted = try System.StreamSocket.accept(listener) else { return }
                fd = accepted
            } catch {
                if error.errno == EMFILE || error.errno == ENFILE || error.errno == ENOBUFS || error.errno == ENOMEM {
                    outOfDescriptors(error)
                } else {
                    logger.error("control socket: \(error)")
                }
                return
            }
            backoff = .milliseconds(50)
            let (clients, reserve) = lock.withLock { (sessions.count, budget.reserve(configured: settings.reservedFiles)) }
            guard budget.admits(clients: clients, reserve: reserve) else {
                lock.withLock { refused.descriptors += 1 }
                let reason = "eventbusd keeps its last \(reserve) file descriptors for its modules and sources (control.reserved_files) and serves \(clients) client(s); try again later"
                if let summary = exhaustionLog.record() {
                    logger.warning("control: refused a connection: \(reason)\(summary)")
                }
                refuse(fd, code: "too_many_clients", message: reason)
                continue
            }
            let peer: System.StreamSocket.Peer
            do {
                peer = try System.StreamSocket.peer(of: fd)
            } catch {
                logger.error("control socket: cannot read the client's credentials, disconnecting it: \(error)")
                System.StreamSocket.close(fd)
                continue
            }
            enum Admission { case session(ControlSession), refused(String), stopped }
            let admission: Admission = lock.withLock {
                guard !stopped else { return .stopped }
                if sessions.count >= settings.maxClients {
                    refused.limit += 1
                    return .refused("eventbusd already serves \(sessions.count) client(s), its limit (control.max_clients)")
                }
                let mine = clientsByUser[peer.userID, default: 0]
                if peer.userID != 0, mine >= settings.maxClientsPerUser {
                    refused.limit += 1
                    return .refused("uid \(peer.userID) already has \(mine) connection(s) to eventbusd, its limit (control.max_clients_per_user)")
                }
                nextSessionID += 1
                let session = ControlSession(id: nextSessionID, fd: fd, peer: peer, server: self)
                sessions[ObjectIdentifier(session)] = session
                clientsByUser[peer.userID, default: 0] += 1
                return .session(session)
            }
            switch admission {
            case .stopped:
                System.StreamSocket.close(fd)
                return
            case .refused(let reason):
                if let summary = limitLog.record() {
                    logger.warning("control: refused a connection from uid \(peer.userID) (pid \(peer.processID)): \(reason)\(summary)")
                }
                refuse(fd, code: "too_many_clients", message: reason)
            case .session(let session):
                do {
                    try session.start()
                    logger.debug("control client \(session.id) connected (uid \(peer.userID), pid \(peer.processID))")
                } catch {
                    logger.error("control socket: cannot watch client \(session.id): \(error)")
                    System.StreamSocket.close(fd)
                    forget(session)
                }
            }
        }
    }

    /// `accept` failed for want of descriptors. Gives the spare back to take the waiting
    /// client, refuses it, and takes the spare again; when that does not work either, stops
    /// watching the listening socket for a while (50 ms, doubling to 1 s).
    private func outOfDescriptors(_ error: System.CallError) {
        if let summary = exhaustionLog.record() {
            logger.error("control socket: out of file descriptors (\(error.reason)); refusing new clients until some are free\(summary)")
        }
        if spare >= 0 {
            System.StreamSocket.close(spare)
            spare = -1
            let fd = (try? System.StreamSocket.accept(listener)) ?? nil
            if let fd {
                lock.withLock { refused.descriptors += 1 }
                refuse(fd, code: "too_many_clients", message: "eventbusd has run out of file descriptors (\(error.reason)); try again later")
            }
            spare = System.StreamSocket.openSpare()
            if fd != nil && spare >= 0 { return }  // the next wake-up tries again
        }
        guard !acceptPaused else { return }
        acceptPaused = true
        loop.modify(listener, events: 0)
        let pause = backoff
        backoff = min(backoff * 2, .seconds(1))
        loop.after(pause) { [self] in
            acceptPaused = false
            if spare < 0 { spare = System.StreamSocket.openSpare() }
            lock.withLock { stopped } || acceptingClosed ? () : loop.modify(listener, events: ControlLoop.readable)
        }
    }

    /// One `error` line to a client that is not admitted, then close. Best effort: a new
    /// socket's buffer takes the line without blocking.
    private func refuse(_ fd: Int32, code: String, message: String) {
        let line = JSONWriter.line(["type": "error", "code": .string(code), "message": .string(message)])
        _ = line.withUnsafeBytes { try? System.StreamSocket.write(fd, $0) }
        System.StreamSocket.close(fd)
    }

    /// A session closed its socket.
    /// Forgets a closed session, whose buffers held `released` bytes (counted for ``HeapTrim``).
    /// On the loop.
    func remove(_ session: ControlSession, released: Int) {
        forget(session)
        if lock.withLock({ heapTrim.release(released) }) { loop.after(HeapTrim.quiet) { [self] in trimWhenSettled() } }
        logger.debug("control client \(session.id) disconnected")
    }

    /// On the loop: trims once the large releases have settled (see ``HeapTrim``).
    private func trimWhenSettled() {
        if lock.withLock({ heapTrim.check() }) {
            HeapTrim.trim()
        } else {
            loop.after(HeapTrim.quiet) { [self] in trimWhenSettled() }
        }
    }

    private func forget(_ session: ControlSession) {
        lock.withLock {
            guard sessions.removeValue(forKey: ObjectIdentifier(session)) != nil else { return }
            let left = clientsByUser[session.peer.userID, default: 1] - 1
            clientsByUser[session.peer.userID] = left > 0 ? left : nil
        }
    }

    // MARK: Permissions (any thread)

    enum Permission: String {
        case tail, post
        /// Re-reading the config: root and the user eventbusd runs as (systemd's `ExecReload=`
        /// runs `eventbus reload` as the service's `User=`), never a group.
        case reload
    }

    /// Whether `peer` may do `permission`: root always; others when they are in the configured
    /// group, as their primary group or a supplementary one.
    func permits(_ permission: Permission, _ peer: System.StreamSocket.Peer) -> Bool {
        if peer.userID == 0 { return true }
        if permission == .reload { return peer.userID == geteuid() }
        let group = lock.withLock { permission == .tail ? settings.tailGroup : settings.postGroup }
        guard let group else { return false }
        return peer.groupID == group.id || peer.groups.contains(group.id)
    }

    /// Why `peer` may not do `permission`, in the words the client and the log get.
    func refusal(_ permission: Permission, _ peer: System.StreamSocket.Peer) -> String {
        if permission == .reload { return "only root and uid \(geteuid()) (eventbusd's own user) may reload" }
        let group = lock.withLock { permission == .tail ? settings.tailGroup : settings.postGroup }
        let what = permission == .tail ? "tail, status and modules" : "post"
        guard let group else {
            return "only root may \(what) (this eventbusd has no control.\(permission)_group)"
        }
        return "uid \(peer.userID) is neither root nor in group \(group.name), which may \(what)"
    }

    var clientBuffer: (events: Int, bytes: Int) { lock.withLock { (settings.clientBuffer, settings.clientBufferBytes) } }
    /// What one client's file watch may hold (`watch_entries`).
    var watchEntries: Int { lock.withLock { settings.watchEntries } }

    /// The sequence of the newest event posted so far.
    var newestSequence: UInt64 { lock.withLock { ring.newestSequence } }
    var accessSettings: (files: ControlSettings.FilesAccess, journalGroups: [String]) {
        lock.withLock { (settings.filesAccess, settings.journalGroups) }
    }

    // MARK: Tailing

    /// The start of a subscription's stream, as the server saw it when the feed joined.
    struct Attachment {
        var oldestSequence: UInt64
        var newestSequence: UInt64
        /// When the oldest held event was posted (nil: none held).
        var oldestTime: Date?
        /// A `since_time` replay that cannot be whole: events posted after that time were
        /// already evicted from the ring (how many is not known, so no gap count is invented).
        var replayIncomplete: Bool
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
                items += ring.events(from: since, where: feed.wants).map(TailFeed.Item.init)
            } else if feed.filter.since != nil {
                items = ring.events(from: 1, where: feed.wants).map(TailFeed.Item.init)
            } else if let last, last > 0 {
                items = ring.last(last, where: feed.wants).map(TailFeed.Item.init)
            }
            feed.setReplay(items, lastSequence: ring.newestSequence)
            feeds.append(feed)
            let incomplete = feed.filter.since.map { since in ring.newestEvictedTime.map { $0 >= since } ?? false } ?? false
            return Attachment(oldestSequence: ring.oldestSequence, newestSequence: ring.newestSequence,
                              oldestTime: ring.oldestTime, replayIncomplete: incomplete)
        }
    }

    func detach(_ feed: TailFeed) {
        lock.withLock { feeds.removeAll { $0 === feed } }
    }

    /// The fan-out: on the bus's delivery loop, for every posted event.
    private func deliver(_ event: Event) {
        lock.lock()
        fannedOut = max(fannedOut, event.sequence)
        let bytes = event.estimatedBytes
        let evicted = ring.append(event, bytes: bytes)
        for feed in feeds where feed.wants(event) {
            feed.offer(event, bytes: bytes)
        }
        let checkTrim = evicted > 0 && heapTrim.release(evicted)
        lock.unlock()
        if checkTrim { loop.execute { [self] in loop.after(HeapTrim.quiet) { [self] in trimWhenSettled() } } }
    }

    // MARK: Reports (session queues)

    func status() -> JSON {
        let host = snapshot()
        let bus = bus.statistics
        let (socket, clients, tailing, refusals, replay) = lock.withLock {
            (settings.socketPath, sessions.count, feeds.count, refused,
             JSON.object(["capacity": .int(Int64(ring.capacity)), "held": .int(Int64(ring.count)),
                          "byte_capacity": .int(Int64(ring.byteCapacity)), "bytes": .int(Int64(ring.bytes)),
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
                var source: [String: JSON] = ["id": .string(id), "subscriptions": .int(Int64(bus.sources[id]!))]
                if let state = host.sourceStates[id] { source["state"] = .string(state) }
                return .object(source)
            }),
            "modules": .array(host.modules.map(Self.moduleJSON)),
            "control": .object(["socket": .string(socket), "clients": .int(Int64(clients)),
                                 "tailing": .int(Int64(tailing)), "replay": replay,
                                 "refused": .object(["limit": .int(Int64(refusals.limit)),
                                                     "descriptors": .int(Int64(refusals.descriptors))])]),
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
                    "queued": .int(Int64(statistics.queued)), "queued_bytes": .int(Int64(statistics.queuedBytes)),
                ])
            }),
        ])
    }

    /// The clients' side of the host's metrics: counts, and each tailing client's feed.
    struct ClientFigures {
        var clients: Int
        var feeds: [(id: Int, statistics: TailFeed.Statistics)]
        var refusedLimit: Int
        var refusedDescriptors: Int
    }

    func clientFigures() -> ClientFigures {
        lock.lock()
        let clients = sessions.count
        let feeds = self.feeds
        let refused = self.refused
        lock.unlock()
        var figures = ClientFigures(clients: clients, feeds: [], refusedLimit: refused.limit, refusedDescriptors: refused.descriptors)
        for feed in feeds { figures.feeds.append((id: feed.client.id, statistics: feed.statistics)) }
        return figures
    }

    static func moduleJSON(_ module: ModuleStatistics) -> JSON {
        var object: [String: JSON] = [
            "name": .string(module.name),
            "path": .string(module.path),
            "delivered": .int(Int64(module.delivered)),
            "dropped": .int(Int64(module.dropped)),
            "queued": .int(Int64(module.queued)),
            "queued_bytes": .int(Int64(module.queuedBytes)),
            "errors": .int(Int64(module.errors)),
        ]
        switch module.state {
        case .starting: object["state"] = "starting"
        case .active: object["state"] = "active"
        case .disabled: object["state"] = "disabled"
        case .stopped: object["state"] = "stopped"
        case .restarting: object["state"] = "restarting"
        case .failed(let reason):
            object["state"] = "failed"
            object["reason"] = .string(reason)
        }
        if let name = module.reportedName { object["reported_name"] = .string(name) }
        if let version = module.version { object["version"] = .string(version) }
        object["isolation"] = .string(module.isolation.rawValue)
        object["restarts"] = .int(Int64(module.restarts))
        if let pid = module.workerPID { object["pid"] = .int(Int64(pid)) }
        if let crash = module.lastCrash { object["last_crash"] = .string(crash) }
        if let reason = module.configNotApplied { object["config_not_applied"] = .string(reason) }
        if let time = module.lastCrashTime { object["last_crash_time"] = .string(time.formatted(.iso8601)) }
        return .object(object)
    }
}
