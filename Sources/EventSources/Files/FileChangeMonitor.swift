import Dispatch
import EventBusKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// The host's one inotify instance, shared by every `files` source.
///
/// Why one: inotify instances are a scarce per-user resource (`fs.inotify.max_user_instances`,
/// 128 here, shared by every process of the user), and one instance lets the kernel share watches:
/// `inotify_add_watch` on an inode already watched returns the same watch descriptor. The monitor
/// reference-counts each descriptor by the sources that hold it, so two sources on `/etc` (or a
/// recursive one on `/` and one on `/etc`) cost one kernel watch, removed when the last lets go.
/// Every watch uses the same mask, so sharing never narrows what another source sees.
///
/// ## Threads
/// One serial queue, `eventbus.files`, owns everything: the descriptor, the watch table, every
/// source's tree and snapshot. A reader thread (`eventbus.files.reader`, see ``InotifyReader``)
/// waits on the descriptor and handles what it reads as blocks on that queue, run on the reader
/// thread itself; sources are attached and detached by blocks on the same queue. Events are
/// posted to the bus from those blocks, so subscribers without a mailbox run on the reader
/// thread — handler modules have mailboxes and never hold it up. A stalled reader cannot lose
/// events silently: the kernel's queue fills, overflows, and every source says so and rescans.
///
/// The instance is made when the first source starts and closed when the last one stops.
public final class FileChangeMonitor: @unchecked Sendable {
    /// The monitor `FileSources.register(on:)` uses unless given another.
    public static let shared = FileChangeMonitor()

    let queue = DispatchQueue(label: "eventbus.files")

    // Owned by `queue`. Those the read path touches for every read or event are
    // `@exclusivity(unchecked)`, as in `FileWatchSource` (the queue rules out overlapping access;
    // the run-time check costs instructions per event).
    @exclusivity(unchecked) private var descriptor: Int32 = -1
    private var reader: InotifyReader?
    private var readerPaused = false
    /// Kernel watch → the sources holding it, in the order they took it.
    @exclusivity(unchecked) private var holders = WatchTable<[FileWatchSource]>()
    private var sources: [ObjectIdentifier: FileWatchSource] = [:]
    private var overflows = 0
    private var rescans = 0
    /// `CLOCK_REALTIME` just before the last read that found the kernel's queue empty: every
    /// event queued before then has been handled. 0: none yet.
    @exclusivity(unchecked) private var lastQuiet: Int64 = 0
    /// `CLOCK_REALTIME` just before the last read that returned events.
    @exclusivity(unchecked) private var lastEventRead: Int64 = 0
    private let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)
    /// The events of the buffer being handled (and of the reads that looked for a move's
    /// partner), kept between reads so that a read costs no allocation.
    @exclusivity(unchecked) private var batch = InotifyBatch()
    /// When the read whose events are being handled returned; nil outside the handling of a read.
    @exclusivity(unchecked) private(set) var readTime: ReadTime?

    /// When a read returned: the time the events made from its changes carry (see
    /// `FileWatchSource.send`). The kernel queued each of those changes before it.
    struct ReadTime {
        var wall: Date
        var monotonic: UInt64

        static func now() -> ReadTime {
            ReadTime(wall: Date(), monotonic: MonotonicClock.now())
        }
    }

    /// When each posted event passed the read path's stages; nil unless asked for.
    private let stageStamps: FileStageStamps?

    /// `recordingStages`: note when each posted event passed the read path's stages, for a
    /// latency breakdown (``takeStageRecords()``; what `eventbus-bench files` prints). It costs a
    /// clock read and a record per event; off, nothing per event (see ``StageStamping``).
    public init(recordingStages: Bool = false) {
        stageStamps = recordingStages ? FileStageStamps() : nil
    }

    deinit {
        buffer.deallocate()
    }

    /// A snapshot for status displays and tests.
    public struct Statistics: Sendable {
        /// Kernel watches held (each shared by every source that watches its directory).
        public var kernelWatches: Int
        /// Running `files` sources.
        public var sources: Int
        /// Kernel queue overflows seen since the monitor was made.
        public var overflows: Int
        /// Walks of a source's tree after an overflow, since the monitor was made: one per
        /// overflow and source whose root was there to walk.
        public var rescans: Int
        /// Whether the inotify instance is open.
        public var isOpen: Bool
    }

    /// Blocks until the monitor's queue has answered: not for use on that queue.
    public var statistics: Statistics {
        queue.sync {
            Statistics(kernelWatches: holders.count, sources: sources.count, overflows: overflows,
                       rescans: rescans, isOpen: descriptor >= 0)
        }
    }

    /// What the running source for `watch` knows exists under its root, and where that stands
    /// in its event stream (see ``FileListing``); nil when no source on the same root with the
    /// same recursion is running (a subscriber reconciling holds one). A source with exactly
    /// these options answers first; otherwise one that differs only in what does not change its
    /// tree (re-arming, the entry limit) — a watch from the host's config answers a client that
    /// asks with the CLI's defaults. Blocks until the monitor's queue has answered: not for use
    /// on that queue. Costs the tree.
    public func listing(of watch: FileWatch) -> FileListing? {
        queue.sync {
            let running = sources.values.filter { $0.options.path == watch.path && $0.options.recursive == watch.recursive }
            return (running.first { $0.options == watch } ?? running.first)?.listing()
        }
    }

    /// The listing of a watch that runs only for the time of the answer: a scan of the tree by
    /// a source that posts nothing, so no subscriber of `fs.>` sees a watch nobody asked to
    /// follow (its "does not exist" or "over the limit" notices included). `sequence` is 0: the
    /// source posted nothing. Fails when the inotify instance cannot be made. Blocks until the
    /// monitor's queue has answered.
    public func scannedListing(of watch: FileWatch) -> Result<FileListing, FileWatchFailure> {
        queue.sync {
            let source = FileWatchSource(id: FileWatch.kind + ":" + watch.description, options: watch, monitor: self)
            if let failure = openIfNeeded() {
                if sources.isEmpty { close() }
                return .failure(FileWatchFailure(message: Self.instanceFailureMessage(failure)))
            }
            // Not `begin(bus:)`: without a bus the source scans and holds watches but posts nothing.
            sources[ObjectIdentifier(source)] = source
            source.arm(initial: true)
            let listing = source.listing()
            sources.removeValue(forKey: ObjectIdentifier(source))
            source.end()
            if sources.isEmpty { close() }
            return .success(listing)
        }
    }

    /// Why a file watch could not be made.
    public struct FileWatchFailure: Error, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    // MARK: Sources (called from any thread)

    func attach(_ source: FileWatchSource, bus: Bus) {
        queue.async { [self] in
            sources[ObjectIdentifier(source)] = source
            source.begin(bus: bus)
            if let failure = openIfNeeded() {
                source.instanceFailed(failure)
            } else {
                source.arm(initial: true)
            }
        }
    }

    func detach(_ source: FileWatchSource) {
        queue.async { [self] in
            guard sources.removeValue(forKey: ObjectIdentifier(source)) != nil else { return }
            source.end()
            if sources.isEmpty { close() }
        }
    }

    // MARK: Watches (on the queue)

    /// Adds `source` as a holder of the kernel watch for `path`, making the watch if needed.
    /// `following`: follow a symlink (a watch's root); below the root, a directory only — never a
    /// symlink, so a link cannot lead the recursion out of the tree or into a loop.
    func addWatch(_ path: String, following: Bool, for source: FileWatchSource) -> WatchResult {
        guard descriptor >= 0 else { return .failed(EBADF) }
        let flags = following ? 0 : InotifyMask.onlyDirectory | InotifyMask.dontFollow
        let watch: Int32
        do { watch = try System.Inotify.addWatch(descriptor, path, mask: InotifyMask.watched | flags) } catch { return .failed(error.errno) }
        var list = holders[watch] ?? []
        if !list.contains(where: { $0 === source }) { list.append(source) }
        holders[watch] = list
        return .watched(watch)
    }

    enum WatchResult {
        case watched(Int32)
        /// The `errno` of `inotify_add_watch`.
        case failed(Int32)
    }

    /// `source` lets go of `watch`; the last holder's release removes the kernel watch.
    func release(_ watch: Int32, by source: FileWatchSource) {
        guard var list = holders[watch] else { return }
        list.removeAll { $0 === source }
        if list.isEmpty {
            holders[watch] = nil
            // Fails harmlessly when the kernel removed it already (directory deleted).
            try? System.Inotify.removeWatch(watch, from: descriptor)
        } else {
            holders[watch] = list
        }
    }

    /// Nil on success, else the `errno` of `inotify_init1`.
    private func openIfNeeded() -> Int32? {
        guard descriptor < 0 else { return nil }
        let fd: Int32
        do { fd = try System.Inotify.create() } catch { return error.errno }
        let reader: InotifyReader
        do { reader = try InotifyReader(descriptor: fd) } catch { return error.errno }
        descriptor = fd
        self.reader = reader
        reader.start(paused: readerPaused) { [weak self] reader in
            guard let self else { return .idle }
            return queue.sync {
                // A reader stopped (or paused) meanwhile leaves the events to its successor.
                guard self.reader === reader, !reader.isPaused else { return .idle }
                return readAvailable()
            }
        }
        return nil
    }

    private func close() {
        guard let reader else { return }
        reader.stop()  // the reader closes the descriptor
        self.reader = nil
        descriptor = -1
        holders.removeAll()
    }

    // MARK: Reading (on the queue)

    /// Reads and handles what the kernel has queued, one buffer at a time, until a read finds
    /// nothing — or after a bounded number of buffers, so attach/detach blocks are not starved
    /// during a storm (the reader comes back after its pause while data remains). Says whether it
    /// read events and how long the reader may wait for more before calling again (see
    /// ``settleDelay(quietSince:)``).
    ///
    /// Why read again after handling a buffer rather than pause at once: the events that came
    /// while it was handled are there, and a `read` costs less than the pause's sleep and
    /// wake-up (measured: pausing after every read that left the queue empty — `files-reader`,
    /// 100k files — made 10× the context switches).
    private func readAvailable() -> InotifyReader.Outcome {
        if let stageStamps { return readAvailable(stamps: stageStamps) }
        return readAvailable(stamps: NoStageStamps())
    }

    private func readAvailable<Stamps: StageStamping>(stamps: Stamps) -> InotifyReader.Outcome {
        defer { readTime = nil }
        var readEvents = false
        for _ in 0..<64 {
            batch.removeAll(keepingCapacity: true)
            let readTime = FileState.realtimeNow()
            guard readOnce(into: &batch, stamps: stamps) else {
                lastQuiet = readTime
                return InotifyReader.Outcome(readEvents: readEvents, timeout: settleDelay(quietSince: readTime))
            }
            readEvents = true
            lastEventRead = readTime
            handle(&batch, stamps: stamps)
        }
        return InotifyReader.Outcome(readEvents: true, timeout: -1)
    }

    /// How long before a moment every queued event had been handled (``lastQuiet``) a file's
    /// last change (its ctime) must be for its event to be known handled. Why a margin: a change
    /// is stamped a little before its event is queued (and the writer may be preempted between
    /// the two), and ctime comes from a coarse clock that may lag by a tick (≤ 10 ms).
    static let settleMargin: Int64 = 50_000_000

    /// The time (`CLOCK_REALTIME` ns) before which every change to a watched file has had its
    /// event handled: a rescan after an overflow reports a file changed by events (and not
    /// stat'ed since) as `modified` only when its ctime is not older. Why not stat each changed
    /// path once the queue is quiet instead, to compare it later: that costs a `lstat` per created
    /// or written file — 40 % of the reader's time in the files benchmark's storm — for what a
    /// rescan, which stats every path anyway, can tell from the ctime it finds and this time.
    var settledBefore: Int64 { lastQuiet - Self.settleMargin }

    /// The queue was empty at `quietSince`: when to come back (ms, -1: when events come) so that
    /// the last events' changes settle — a later rescan can then trust them — even if nothing
    /// else happens. One wake-up after a burst of events, not one per changed path.
    private func settleDelay(quietSince: Int64) -> Int32 {
        let settled = lastEventRead + Self.settleMargin
        guard lastEventRead > 0, quietSince <= settled else { return -1 }
        return Int32(clamping: (settled - quietSince) / 1_000_000 + 1)
    }

    /// One `read`; false when nothing was there.
    private func readOnce<Stamps: StageStamping>(into batch: inout InotifyBatch, stamps: Stamps) -> Bool {
        // EAGAIN: the kernel's queue is empty.
        guard let count = try? System.read(descriptor, into: buffer), count > 0 else { return false }
        let returned = ReadTime.now()
        readTime = returned
        stamps.readReturned(at: returned.monotonic)
        batch.append(parsing: UnsafeRawBufferPointer(buffer), count: count)
        return true
    }

    /// Waits up to `milliseconds` for more events and reads them; false if none came.
    private func readMore(into batch: inout InotifyBatch, waiting milliseconds: Int32) -> Bool {
        var poller = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)]
        guard let ready = try? System.poll(&poller, timeout: milliseconds), ready > 0 else { return false }
        return readOnce(into: &batch, stamps: NoStageStamps())
    }

    /// How long an `IN_MOVED_FROM` waits for its `IN_MOVED_TO`. The kernel queues both halves of a
    /// rename within one `rename(2)`, but as two insertions: the second can land just after a read
    /// has emptied the queue. If nothing arrives within this window, the rename left the watched
    /// directories (moved out).
    static let movePartnerWait: Int32 = 2
    /// How far ahead a move's partner is looked for: other events (from other directories) can
    /// slip between the two halves, but only a few.
    static let movePartnerWindow = 64

    private func handle<Stamps: StageStamping>(_ events: inout InotifyBatch, stamps: Stamps) {
        /// Events before this index were read before the queue was seen empty for a whole wait:
        /// a partner they lack is not coming.
        var settledThrough = 0
        var index = 0
        while index < events.count {
            let event = events[index]
            index += 1
            if event.mask == 0 { continue }  // the second half of a move, already handled
            if event.has(InotifyMask.overflow) {
                overflows += 1
                for source in sources.values.sorted(by: { $0.id < $1.id }) where source.overflowed() { rescans += 1 }
            } else if event.has(InotifyMask.ignored) {
                for source in holders.removeValue(forKey: event.wd) ?? [] { source.watchRemoved(event.wd) }
            } else if event.has(InotifyMask.movedFrom) {
                var partner: Int?
                var next = index
                while partner == nil, next < index + Self.movePartnerWindow {
                    if next < events.count {
                        if events[next].has(InotifyMask.movedTo), events[next].cookie == event.cookie { partner = next }
                        next += 1
                    } else if index - 1 < settledThrough {
                        break
                    } else if !readMore(into: &events, waiting: Self.movePartnerWait) {
                        settledThrough = events.count
                        break
                    }
                }
                if let partner {
                    let to = events[partner]
                    events.markHandled(partner)
                    dispatchMove(from: event, to: to, of: events, stamps: stamps)
                } else {
                    dispatchMove(from: event, to: nil, of: events, stamps: stamps)
                }
            } else if event.has(InotifyMask.movedTo) {
                dispatchMove(from: nil, to: event, of: events, stamps: stamps)  // moved in from outside every watch
            } else {
                guard let list = holders[event.wd] else { continue }
                events.withName(of: event) { name in
                    for source in list { source.handle(event, name: name, stamps: stamps) }
                }
            }
        }
    }

    /// Hands each source the halves of a rename (events of `batch`) that fall on watches it holds.
    private func dispatchMove<Stamps: StageStamping>(from: InotifyEvent?, to: InotifyEvent?, of batch: InotifyBatch,
                                                     stamps: Stamps) {
        let fromHolders = from.flatMap { holders[$0.wd] } ?? []
        let toHolders = to.flatMap { holders[$0.wd] } ?? []
        var seen = Set<ObjectIdentifier>()
        batch.withNames(of: from, to) { fromName, toName in
            for source in fromHolders + toHolders where seen.insert(ObjectIdentifier(source)).inserted {
                source.handleMove(from: fromHolders.contains { $0 === source } ? from.map { ($0, fromName!) } : nil,
                                  to: toHolders.contains { $0 === source } ? to.map { ($0, toName!) } : nil,
                                  stamps: stamps)
            }
        }
    }

    // MARK: Test hooks

    /// Stops reading the descriptor (events pile up in the kernel until it overflows). For tests
    /// of overflow handling. Nothing is read after it returns: reads happen in queue blocks.
    func pauseReading() {
        queue.sync {
            readerPaused = true
            reader?.setPaused(true)
        }
    }

    func resumeReading() {
        queue.sync {
            readerPaused = false
            reader?.setPaused(false)
        }
    }

    /// Entries visited by every source's folder renames and removals (see
    /// `FileWatchSource.visitedByFolderOperations`) and the paths their snapshots hold.
    var folderWork: (visited: Int, paths: Int) {
        queue.sync {
            sources.values.reduce((0, 0)) { ($0.0 + $1.visitedByFolderOperations, $0.1 + $1.snapshotCount) }
        }
    }

    /// The stage records of the events posted since the last call (empty unless made with
    /// `recordingStages`), oldest first. Blocks until the monitor's queue has answered.
    public func takeStageRecords() -> [FileStageRecord] {
        queue.sync { stageStamps?.take() ?? [] }
    }

    /// Whether the changes of the events read so far have settled (see ``settledBefore``): the
    /// queue has been seen empty a margin after the last read that returned events.
    var changesSettled: Bool { queue.sync { lastQuiet > lastEventRead + Self.settleMargin } }

    /// The inotify descriptor (-1 when closed): tests read `/proc/self/fdinfo/<fd>`.
    var inotifyDescriptor: Int32 { queue.sync { descriptor } }

    // MARK: Error messages

    static func instanceFailureMessage(_ code: Int32) -> String {
        if code == EMFILE && !processIsOutOfDescriptors() {
            let limit = FileWatchLimit.maxUserInstances
            let value = readProcInteger("/proc/sys/fs/inotify/max_user_instances").map(String.init) ?? "?"
            return "cannot create an inotify instance: the limit \(limit.sysctl) (\(value)) is reached for this user. "
                + "Raise it (sysctl -w \(limit.sysctl)=N, and in /etc/sysctl.d to keep it); nothing is watched until then"
        }
        if code == EMFILE {
            return "cannot create an inotify instance: this process has reached its open-file limit (RLIMIT_NOFILE, "
                + "LimitNOFILE= in a systemd unit); nothing is watched until then"
        }
        return "cannot create an inotify instance: \(errorText(code)); nothing is watched until then"
    }

    /// `inotify_init1` says EMFILE both for the per-user instance limit and for the process's
    /// descriptor limit; this tells them apart.
    static func processIsOutOfDescriptors() -> Bool {
        let open = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0
        return open + 1 >= System.openFileLimit().soft
    }
}
