import ControlProtocol
import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import Logging
import Synchronization

/// eventbusd's control socket: the Unix stream socket that `eventbus tail`, `post`, `status` and
/// `modules` talk to, with the line protocol of `Sources/ControlProtocol/PROTOCOL.md`.
///
/// The server is the state the connections share; the roles are in their own files:
/// - ``ControlListener``: binding the socket, accepting and refusing clients.
/// - ``ControlSession`` (one per client, with its ``SessionState``): reading requests, routing
///   them, writing answers and streams.
/// - `ControlServer+Tailing.swift`: the fan-out of every event to the replay ring and the
///   tailing clients' bounded ``TailFeed``s.
/// - ``ControlAccess``: who may do what.
/// - `ControlServer+Reports.swift`: `status`, `modules`, `stats`, `metrics`.
/// - `ControlServer+Shutdown.swift`: client posts, and ending every session at shutdown.
///
/// ## Threads
/// - Fan-out runs on the bus's delivery loop, in one closure subscription to every event: under
///   ``lock`` it appends to the ring and offers the event to each feed whose patterns match
///   (a lock and an append per client; never a write to a socket). Taking the ring and the
///   feed list under one lock is what makes a replay join the live stream with nothing missed
///   and nothing twice.
/// - Accepting, and every connection, run on ``loop``: one epoll thread for all clients (see
///   ``System.EventLoop`` for why). A slow client stalls nobody: its socket is written when epoll
///   says it takes more.
/// - ``start(settings:inherited:)``, ``apply(_:)``, ``refusePosts()``, ``beginStopping(_:)`` and
///   ``stop(within:)`` come from ``BusHost``'s control queue.
/// - Reports are built on the thread that asks (a session's, on the loop; the metrics
///   listener's), from what they read under ``lock``.
final class ControlServer: @unchecked Sendable {
    // @unchecked: mutable state is behind `lock` or `postGate`, or touched only on the host's
    // control queue (`boundPath`, `fanOut`, `listener` until the loop starts) as noted on each.
    // Members are internal only so that the server's extensions (one file per role) reach them.

    /// What status requests report about the host, read when a client asks.
    struct HostSnapshot {
        var configFile: String
        var modules: [ModuleStatistics]
        var rules: [RuleStatistics] = []
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
    let snapshot: @Sendable () -> HostSnapshot
    /// The host's metrics text, for `metrics` requests (``HostMetrics/render()``).
    let metricsText: @Sendable () -> [UInt8]
    /// A module's handler durations, for `stats` with `detail` (nil: not timed).
    let handlerSeconds: @Sendable (String) -> StatsReport.Histogram?
    /// Re-reads the config as SIGHUP does and hands the outcome to its callback (any thread);
    /// set by the host's service before clients are accepted. Nil: `reload` is not offered.
    var reloadHandler: (@Sendable (@escaping @Sendable (ReloadOutcome) -> Void) -> Void)? {
        get { lock.withLock { _reloadHandler } }
        set { lock.withLock { _reloadHandler = newValue } }
    }
    private var _reloadHandler: (@Sendable (@escaping @Sendable (ReloadOutcome) -> Void) -> Void)?  // guarded by `lock`
    let startedAt = Date()
    /// This host's life (``EventCursor``): drawn once, with the bus whose numbers it qualifies.
    let life = EventCursor.newLife()
    let startedMonotonic = ContinuousClock.now
    /// The thread every connection runs on; set by ``start(settings:inherited:on:)``.
    private(set) var loop: System.EventLoop!
    /// Accepts the clients; set by ``start(settings:inherited:on:)``, then the loop's.
    private(set) var listener: ControlListener!
    /// The loop's read buffer, shared by all sessions (they read one at a time, on the loop).
    var readBuffer = [UInt8](repeating: 0, count: 64 * 1024)

    let lock = NSLock()
    // Guarded by `lock`. The members the fan-out touches for every posted event are not checked
    // for exclusive access at run time: the lock already makes each access exclusive, and the
    // check (a thread-local lookup and a set insertion per access, five or six per event) cost
    // the posting thread more than the ring.
    var settings: ControlSettings
    @exclusivity(unchecked) var ring: ReplayRing
    /// What the ring and closed sessions let go of, for giving it back to the kernel.
    @exclusivity(unchecked) var heapTrim = HeapTrim()
    @exclusivity(unchecked) var feeds: [TailFeed] = [] {
        didSet { feedRoute = FeedRoute() }
    }
    /// The feeds that want the last name fanned out (see ``deliver(_:)``).
    @exclusivity(unchecked) var feedRoute = FeedRoute()
    var roster = ClientRoster<ControlSession>()
    var stopped = false
    /// The newest sequence the fan-out has seen: how far the bus's delivery loop has come.
    @exclusivity(unchecked) var fannedOut: UInt64 = 0

    /// Taken around "may clients still post?" and the post itself, so that once
    /// ``refusePosts()`` returns no client post is acknowledged after it.
    let postGate = NSLock()
    var postsRefused = false  // guarded by `postGate`
    /// Set when the host's shutdown begins (``beginStopping(_:)``); guarded by `lock`.
    var stopping: ShutdownProgress?

    // The host's control queue only.
    /// The path this server bound and must remove at stop; nil for an inherited socket.
    var boundPath: String?
    var fanOut: AnyCancellable?

    init(bus: Bus, logger: Logger, snapshot: @escaping @Sendable () -> HostSnapshot,
         metrics: @escaping @Sendable () -> [UInt8] = { [] },
         handlerSeconds: @escaping @Sendable (String) -> StatsReport.Histogram? = { _ in nil }) {
        self.bus = bus
        self.logger = logger
        self.snapshot = snapshot
        self.metricsText = metrics
        self.handlerSeconds = handlerSeconds
        self.settings = ControlSettings()
        self.ring = ReplayRing(capacity: 0, byteCapacity: 0)
    }

    // MARK: Lifecycle (the host's control queue)

    /// Binds the configured socket (or takes `inherited`, a listening socket from systemd's
    /// socket activation; `settings.socketPath` then names where it is, for `status`), to be
    /// served on `loop` (started; the host stops it after ``stop(within:)``). The ring holds
    /// every event posted from here on; clients are answered after ``startAccepting()``.
    func start(settings: ControlSettings, inherited: Int32? = nil, on loop: System.EventLoop) throws(StartError) {
        lock.withLock {
            self.settings = settings
            ring = ReplayRing(capacity: settings.replayEvents, byteCapacity: settings.replayBytes)
        }
        let socket: Int32
        if let inherited {
            do { try System.StreamSocket.makeNonBlocking(inherited) } catch { throw .inheritedSocket("\(error)") }
            socket = inherited
        } else {
            socket = try ControlListener.bind(settings, logger: logger)
            boundPath = settings.socketPath
        }
        self.loop = loop
        listener = ControlListener(fd: socket, server: self)
        // Events posted before the fan-out existed are not waited for at shutdown.
        let postedBefore = bus.statistics.posted
        fanOut = bus.publisher(for: EventPattern.all).sink { [unowned self] event in self.deliver(event) }
        bus.setHandOutCheck { [unowned self] sequence in handedToEveryTail(through: sequence) }
        bus.setHandOutPatience(settings.handOutPatience)
        lock.withLock { fannedOut = max(fannedOut, postedBefore) }
        let limit = System.openFileLimit()
        let reserve = listener.reserve(configured: settings.reservedFiles)
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
                try loop.add(listener.fd, events: System.EventLoop.readable, watcher: listener)
                outcome.withLock { $0 = .some(nil) }
            } catch {
                closeSocket(listener.fd)
                outcome.withLock { $0 = .some(error) }
            }
            done.signal()
        }
        done.wait()
        if case .some(.some(let error)) = outcome.withLock({ $0 }) { throw .system(error) }
    }

    private func closeSocket(_ fd: Int32) {
        System.StreamSocket.close(fd)
        if let boundPath { System.StreamSocket.unlink(boundPath) }
    }

    /// A reloaded config's control section: groups, client buffer, replay size and hand-out
    /// patience apply at once (to requests, subscriptions and positions from now on); a new
    /// socket path needs a restart.
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
        bus.setHandOutPatience(new.handOutPatience)
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

    // MARK: Clients (the loop)

    enum Admission {
        /// Served, or closed at once because the server stops.
        case handled
        /// Refused by a limit, in words for the client and the log.
        case refused(String)
    }

    /// Makes a session of an accepted client, unless a limit refuses it (the listener then
    /// tells the client why). On the loop.
    func admit(_ fd: Int32, peer: System.StreamSocket.Peer) -> Admission {
        enum Decision { case session(ControlSession), refused(String), stopped }
        let decision: Decision = lock.withLock {
            guard !stopped else { return .stopped }
            switch roster.admit(userID: peer.userID, maxClients: settings.maxClients, maxPerUser: settings.maxClientsPerUser) {
            case .refused(let reason): return .refused(reason)
            case .admitted(let id):
                let session = ControlSession(id: id, fd: fd, peer: peer, server: self)
                roster.add(session, user: peer.userID)
                return .session(session)
            }
        }
        switch decision {
        case .stopped:
            System.StreamSocket.close(fd)
        case .refused(let reason):
            return .refused(reason)
        case .session(let session):
            do {
                try session.start()
                logger.debug("control client \(session.id) connected (uid \(peer.userID), pid \(peer.processID))")
            } catch {
                logger.error("control socket: cannot watch client \(session.id): \(error)")
                System.StreamSocket.close(fd)
                lock.withLock { roster.remove(session, user: peer.userID) }
            }
        }
        return .handled
    }

    /// Forgets a closed session, whose buffers held `released` bytes (counted for ``HeapTrim``).
    /// On the loop.
    func remove(_ session: ControlSession, released: Int) {
        let mayTrim = lock.withLock { () -> Bool in
            roster.remove(session, user: session.peer.userID)
            return heapTrim.release(released)
        }
        if mayTrim { loop.after(HeapTrim.quiet) { [self] in trimWhenSettled() } }
        logger.debug("control client \(session.id) disconnected")
    }

    /// On the loop: trims once the large releases have settled (see ``HeapTrim``).
    func trimWhenSettled() {
        if lock.withLock({ heapTrim.check() }) {
            HeapTrim.trim()
        } else {
            loop.after(HeapTrim.quiet) { [self] in trimWhenSettled() }
        }
    }

    /// For the listener's descriptor budget: the clients served, and `control.reserved_files`.
    func clientCountAndReserve() -> (clients: Int, reservedFiles: Int?) {
        lock.withLock { (roster.count, settings.reservedFiles) }
    }

    func countRefusalForDescriptors() {
        lock.withLock { roster.refusedForDescriptors() }
    }

    var isStopped: Bool { lock.withLock { stopped } }

    // MARK: Settings, as requests see them (any thread)

    /// Who may do what, under the settings of now.
    var access: ControlAccess {
        lock.withLock { ControlAccess(tailGroup: settings.tailGroup, postGroup: settings.postGroup) }
    }
    var clientBuffer: (events: Int, bytes: Int) { lock.withLock { (settings.clientBuffer, settings.clientBufferBytes) } }
    /// What one client's file watch may hold (`watch_entries`).
    var watchEntries: Int { lock.withLock { settings.watchEntries } }
    /// The sequence of the newest event posted so far.
    var newestSequence: UInt64 { lock.withLock { ring.newestSequence } }
    var accessSettings: (files: ControlSettings.FilesAccess, journalGroups: [String]) {
        lock.withLock { (settings.filesAccess, settings.journalGroups) }
    }
}
