import EventBusKit
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// One `files` source: a ``FileWatch`` (a path, maybe recursive) turned into `fs.*` events.
///
/// It keeps, for its own tree, which kernel watch stands for which directory and a snapshot of
/// what its subscribers have been told exists (path → directory or not, and device, inode, mtime,
/// size as last stat'ed — see ``FileState``). The snapshot makes the source lossless and idempotent:
/// - a `created` for a path already known as the same file is a duplicate (a directory scan and the
///   kernel both saw it) and is dropped; a `deleted` for an unknown path likewise;
/// - after an overflow, comparing the snapshot with the disk gives what subscribers missed: paths
///   that appeared, vanished or were replaced; files whose mtime, ctime or size differ from the
///   last stat; and files changed by an event (never stat'ed since) whose ctime says they may
///   have changed after the last moment every event was handled (``FileChangeMonitor/settledBefore``).
/// - it is indexed by folder (``Snapshot``), so a folder's rename or removal costs its subtree;
/// - it answers ``listing()``: what a subscriber that lost events rebuilds its picture from.
///
/// Threads: `start` and `stop` come from any thread and only hand over to the monitor; everything
/// else runs on the monitor's queue (``FileChangeMonitor``), which owns all the state below.
final class FileWatchSource: EventSource, @unchecked Sendable {
    let id: String
    let options: FileWatch
    private let monitor: FileChangeMonitor
    /// Set by `stop` at once, so that nothing is posted after it (the queue finishes the cleanup).
    private let stopped = Atomic<Bool>(false)

    // Owned by the monitor's queue. Those read or written for every event are
    // `@exclusivity(unchecked)`: Swift checks each access to a class's `var` for overlap at run
    // time (~500 instructions per event over the read path, callgrind), and the one serial queue
    // already rules overlap out — no block touches them while another runs, and nothing the read
    // path calls out to (the bus's subscribers) can reach them but through that queue.
    @exclusivity(unchecked) private var bus: Bus?
    /// Kernel watch → the directory (or the root file) it stands for in this tree, hashed once
    /// here: an event's path is its watch's directory and a name, and the directory is its
    /// folder in the snapshot's index.
    @exclusivity(unchecked) private var directories = WatchTable<HashedPath>()
    private var watchOf: [HashedPath: Int32] = [:]
    @exclusivity(unchecked) private var snapshot = Snapshot()
    /// The root's watch while armed.
    @exclusivity(unchecked) private var rootWatch: Int32?
    private var rootIsDirectory = false
    /// While the root is missing and re-arming was asked for: the watch on its nearest existing
    /// ancestor, waiting for the next component of the root's path to appear.
    @exclusivity(unchecked) private var awaiting: (watch: Int32, directory: String)?
    /// The bus sequence of the last event posted: where a listing stands in the stream.
    @exclusivity(unchecked) private var lastSequence: UInt64 = 0
    /// Set when the tree outgrew ``FileWatch/entryLimit``: the watch has stopped for good.
    @exclusivity(unchecked) private var overLimit = false
    /// Entries visited by folder renames and removals: what tests count to see that a folder's
    /// operation costs its subtree, not the snapshot.
    private(set) var visitedByFolderOperations = 0

    init(id: String, options: FileWatch, monitor: FileChangeMonitor) {
        self.id = id
        self.options = options
        self.monitor = monitor
        rootPath = HashedPath(options.path)
    }

    func start(posting bus: Bus) {
        monitor.attach(self, bus: bus)
    }

    func stop() {
        stopped.store(true, ordering: .releasing)
        monitor.detach(self)
    }

    private var root: String { options.path }
    private let rootPath: HashedPath

    // MARK: Arming (on the queue)

    func begin(bus: Bus) {
        self.bus = bus
    }

    /// Watches the root and records what is there. `initial`: the first arming, silent (subscribers
    /// get changes from now on); otherwise a re-arming, which reports what the root holds now.
    func arm(initial: Bool) {
        guard !overLimit else { return }
        let state: FileState
        do { state = try FileState.reading(root, following: true) } catch {
            let code = error.errno
            if initial {
                let waiting = options.rearmWhenRecreated ? "; watching for it to be created" : ""
                post(FileChange(kind: .error, path: root, message: "\(root): \(error.reason)\(waiting)",
                                errorNumber: code))
            }
            if options.rearmWhenRecreated { awaitRoot() }
            return
        }
        var failures: [(String, Int32)] = []
        guard let watch = addWatch(rootPath, following: true, failures: &failures) else {
            reportWatchFailures(failures)
            if options.rearmWhenRecreated, FileState(path: root, following: true) == nil { awaitRoot() }
            return
        }
        rootWatch = watch
        rootIsDirectory = state.isDirectory
        if !initial {
            post(FileChange(kind: .rootRearmed, path: root, isDirectory: state.isDirectory, origin: .scan,
                            message: "\(root) exists again and is watched"))
        }
        if state.isDirectory {
            addTree(rootPath, report: !initial, failures: &failures)
            if stopIfOverLimit() { return }
        } else {
            snapshot[root] = state
        }
        reportWatchFailures(failures)
    }

    /// The snapshot holds more than ``FileWatch/entryLimit`` entries.
    private var isOverLimit: Bool { options.entryLimit.map { snapshot.count > $0 } ?? false }

    /// Past ``FileWatch/entryLimit``: says so once and lets go of every kernel watch and entry;
    /// returns whether the watch has stopped. Checked where the snapshot grows.
    private func stopIfOverLimit() -> Bool {
        if overLimit { return true }
        guard let limit = options.entryLimit, isOverLimit else { return false }
        overLimit = true
        disarm()
        post(FileChange(kind: .error, path: root, isDirectory: rootIsDirectory, message:
            "\(root) holds more than \(limit) files and directories, the limit of this watch; it has stopped. "
            + "Watch a smaller tree\(options.recursive ? " (or without --recursive)" : ""), or raise the limit (control.watch_entries for eventbus tail)"))
        return true
    }

    /// Stopped: lets go of everything, the bus handle included.
    func end() {
        disarm()
        bus = nil
    }

    /// Releases every kernel watch and forgets the tree (stopped, or the root went away).
    private func disarm() {
        for watch in Set(directories.keys) { monitor.release(watch, by: self) }
        if let awaiting { monitor.release(awaiting.watch, by: self) }
        directories.removeAll()
        watchOf.removeAll()
        snapshot.removeAll()
        rootWatch = nil
        awaiting = nil
    }

    /// The monitor could not make its inotify instance.
    func instanceFailed(_ code: Int32) {
        post(FileChange(kind: .error, path: root, message: FileChangeMonitor.instanceFailureMessage(code),
                        limit: code == EMFILE && !FileChangeMonitor.processIsOutOfDescriptors() ? .maxUserInstances : nil,
                        errorNumber: code))
    }

    /// Watches `top` (already watched: fine) and records what it contains, reporting each entry
    /// as `created` (origin `scan`) when `report`; recursive: the same for every directory below.
    ///
    /// Why no event is missed: each directory's watch is added *before* it is listed, so an entry
    /// made before the watch is in the listing and one made after it comes as an event; one in
    /// both is recognised by the snapshot and reported once.
    private func addTree(_ top: HashedPath, report: Bool, failures: inout [(String, Int32)]) {
        var pending = [top]
        while let directory = pending.popLast() {
            guard addWatch(directory, following: directory == rootPath, failures: &failures) != nil else { continue }
            for name in FilePath.entries(of: directory.path) {
                let path = HashedPath(directory, name)
                guard let state = FileState(path: path.path) else { continue }  // already gone: nothing to report
                let known = snapshot.update(state, at: path, in: directory)
                // Known already (reported by an event): the same file, or of the same type when
                // its inode was never taken.
                let reported = known.map { $0.identity == nil ? $0.isDirectory == state.isDirectory : $0.isSameFile(as: state) }
                if report, reported != true {
                    post(.created, path, isDirectory: state.isDirectory, origin: .scan, stamps: NoStageStamps())
                }
                if isOverLimit { return }  // the caller stops the watch
                if options.recursive && state.isDirectory { pending.append(path) }
            }
        }
    }

    /// Adds (or joins) the kernel watch for `path` and maps it in this tree. Nil when it cannot be
    /// watched; failures other than "already gone" are collected for one `fs.error` per cause.
    private func addWatch(_ path: HashedPath, following: Bool, failures: inout [(String, Int32)]) -> Int32? {
        if let watch = watchOf[path] { return watch }
        switch monitor.addWatch(path.path, following: following, for: self) {
        case .watched(let watch):
            if let other = directories[watch], other != path {
                // The same directory under a second path (a bind mount inside the tree): it is
                // watched once, under the first path, and not descended into again (no loops).
                return nil
            }
            directories[watch] = path
            watchOf[path] = watch
            return watch
        case .failed(let code):
            if code != ENOENT && code != ENOTDIR { failures.append((path.path, code)) }
            return nil
        }
    }

    private func reportWatchFailures(_ failures: [(String, Int32)]) {
        let byCause = Dictionary(grouping: failures, by: { $0.1 })
        for (code, failed) in byCause.sorted(by: { $0.key < $1.key }) {
            let first = failed[0].0
            let what = failed.count == 1 ? first : "\(failed.count) directories (first: \(first))"
            if code == ENOSPC {
                let limit = FileWatchLimit.maxUserWatches
                let value = readProcInteger("/proc/sys/fs/inotify/max_user_watches").map(String.init) ?? "?"
                post(FileChange(kind: .error, path: first, isDirectory: true, message:
                    "cannot watch \(what): the inotify watch limit \(limit.sysctl) (\(value)) is reached "
                    + "for this user. Raise it (sysctl -w \(limit.sysctl)=N, and in /etc/sysctl.d to keep it); "
                    + "changes inside are not reported until then, existing watches keep working",
                    limit: limit, errorNumber: code))
            } else {
                post(FileChange(kind: .error, path: first, isDirectory: true,
                                message: "cannot watch \(what): \(errorText(code))", errorNumber: code))
            }
        }
    }

    // MARK: Kernel events (on the queue)

    /// An event on a watch this source holds (moves go to `handleMove`), and its name (valid
    /// during the call; see ``InotifyBatch``). `stamps`: see ``StageStamping``.
    func handle<Stamps: StageStamping>(_ event: InotifyEvent, name: UnsafeRawBufferPointer, stamps: Stamps) {
        if let awaiting, event.wd == awaiting.watch {
            handleWhileAwaiting(event, name: name)
            return
        }
        guard let directory = directories[event.wd] else { return }
        if name.isEmpty {
            // About the watched object itself. For directories below the root the parent's watch
            // reports the same change by name, so only the root's own events count.
            guard event.wd == rootWatch else { return }
            if event.has(InotifyMask.deleteSelf | InotifyMask.moveSelf | InotifyMask.unmount) {
                rootGone(event.has(InotifyMask.moveSelf) ? "moved away" : event.has(InotifyMask.unmount) ? "unmounted" : "deleted")
            } else if let kind = Self.changeKind(event.mask) {
                changed(kind, rootPath, in: nil, isDirectory: rootIsDirectory, stamps: stamps)
            }
            return
        }
        let path = HashedPath(directory, name)
        let isDirectory = event.has(InotifyMask.isDirectory)
        if event.has(InotifyMask.create) {
            created(path, in: directory, isDirectory: isDirectory, origin: .event, stamps: stamps)
        } else if event.has(InotifyMask.delete) {
            deleted(path, in: directory, isDirectory: isDirectory, origin: .event, stamps: stamps)
        } else if let kind = Self.changeKind(event.mask) {
            changed(kind, path, in: directory, isDirectory: isDirectory, stamps: stamps)
        }
    }

    private static func changeKind(_ mask: UInt32) -> FileChange.Kind? {
        if mask & InotifyMask.modify != 0 { return .modified }
        if mask & InotifyMask.closeWrite != 0 { return .closedAfterWrite }
        if mask & InotifyMask.attrib != 0 { return .attributes }
        return nil
    }

    /// One rename, as this source sees it: `from` and/or `to` are the halves on watches it holds,
    /// each with its name (valid during the call; see ``InotifyBatch``).
    func handleMove<Stamps: StageStamping>(from: (event: InotifyEvent, name: UnsafeRawBufferPointer)?,
                                           to: (event: InotifyEvent, name: UnsafeRawBufferPointer)?, stamps: Stamps) {
        if let awaiting {
            if let to, to.event.wd == awaiting.watch { handleWhileAwaiting(to.event, name: to.name) }
            return
        }
        let oldFolder = from.flatMap { directories[$0.event.wd] }
        let newFolder = to.flatMap { directories[$0.event.wd] }
        let isDirectory = (from ?? to).map { $0.event.has(InotifyMask.isDirectory) } ?? false
        switch (oldFolder, newFolder) {
        case let (oldFolder?, newFolder?):
            moved(HashedPath(oldFolder, from!.name), in: oldFolder, to: HashedPath(newFolder, to!.name), in: newFolder,
                  isDirectory: isDirectory, stamps: stamps)
        case let (oldFolder?, nil):
            deleted(HashedPath(oldFolder, from!.name), in: oldFolder, isDirectory: isDirectory, origin: .move, stamps: stamps)
        case let (nil, newFolder?):
            created(HashedPath(newFolder, to!.name), in: newFolder, isDirectory: isDirectory, origin: .move, stamps: stamps)
        case (nil, nil): break
        }
    }

    /// The kernel dropped a watch this source held (`IN_IGNORED`: its directory is gone, or its
    /// file system was unmounted).
    func watchRemoved(_ watch: Int32) {
        if let awaiting, awaiting.watch == watch {
            self.awaiting = nil
            awaitRoot()
            return
        }
        guard let path = directories.removeValue(forKey: watch) else { return }
        watchOf[path] = nil
        if watch == rootWatch { rootGone("its watch was removed") }
    }

    // MARK: Changes

    /// `folder`: the path's folder (its watch's directory).
    private func created<Stamps: StageStamping>(_ path: HashedPath, in folder: HashedPath, isDirectory: Bool,
                                                origin: FileChange.Origin, stamps: Stamps) {
        // One look-up for a path not known yet (the common case): the entry is written at once,
        // and put back in the rare case that it stands for the same file.
        if let known = snapshot.update(.changed(isDirectory: isDirectory), at: path, in: folder), known.identity != nil {
            // Found by a scan (of a new directory, or a rescan) and reported then, unless it has
            // been replaced since: only this case needs a stat.
            guard let now = FileState(path: path.path), !now.isSameFile(as: known) else {
                snapshot.update(known, at: path, in: folder)
                return
            }
        }
        post(.created, path, isDirectory: isDirectory, origin: origin, stamps: stamps)
        if isDirectory, options.recursive {
            var failures: [(String, Int32)] = []
            addTree(path, report: true, failures: &failures)
            if stopIfOverLimit() { return }
            reportWatchFailures(failures)
        } else {
            _ = stopIfOverLimit()
        }
    }

    /// `folder`: the path's folder (its watch's directory), nil for the root.
    private func changed<Stamps: StageStamping>(_ kind: FileChange.Kind, _ path: HashedPath, in folder: HashedPath?,
                                                isDirectory: Bool, stamps: Stamps) {
        if path != rootPath {
            snapshot.markChanged(path, isDirectory: isDirectory, in: folder)
        } else if !rootIsDirectory, let state = FileState(path: root, following: true) {
            // A root file is stat'ed at once: its identity is how a rescan tells a replaced root.
            snapshot.update(state, at: rootPath)
        }
        post(kind, path, isDirectory: isDirectory, stamps: stamps)
    }

    /// `folder`: the path's folder (its watch's directory).
    private func deleted<Stamps: StageStamping>(_ path: HashedPath, in folder: HashedPath, isDirectory: Bool,
                                                origin: FileChange.Origin, stamps: Stamps) {
        let known = snapshot.removeValue(forPath: path, in: folder) != nil
        if isDirectory { forget(below: path) }
        if known { post(.deleted, path, isDirectory: isDirectory, origin: origin, stamps: stamps) }
    }

    /// Drops what is known below `directory` (itself included, for watches) and releases its
    /// watches. Costs the subtree (see ``Snapshot``).
    private func forget(below directory: HashedPath) {
        releaseWatch(of: directory)
        snapshot.removeAll(below: directory) { path in
            visitedByFolderOperations += 1
            releaseWatch(of: path)
        }
    }

    private func releaseWatch(of path: HashedPath) {
        guard let watch = watchOf.removeValue(forKey: path) else { return }
        directories[watch] = nil
        monitor.release(watch, by: self)
    }

    /// `oldFolder`, `newFolder`: the folders of `old` and `new` (their watches' directories).
    private func moved<Stamps: StageStamping>(_ old: HashedPath, in oldFolder: HashedPath, to new: HashedPath,
                                              in newFolder: HashedPath, isDirectory: Bool, stamps: Stamps) {
        let entry = snapshot.removeValue(forPath: old, in: oldFolder)
        // A rename onto an existing name replaces it (an empty directory at most): the move says so.
        if snapshot.removeValue(forPath: new, in: newFolder)?.isDirectory == true { forget(below: new) }
        // A rename keeps inode, mtime and size but changes the inode's ctime: changed by an event.
        snapshot.update(.changed(isDirectory: entry?.isDirectory ?? isDirectory), at: new, in: newFolder)
        if isDirectory {
            // A moved directory keeps its watches; only their paths change. Costs the subtree.
            rebaseWatch(from: old, to: new)
            snapshot.moveAll(below: old, to: new) { from, to, _ in
                visitedByFolderOperations += 1
                rebaseWatch(from: from, to: to)
            }
        }
        post(FileChange(kind: .moved, path: new.path, oldPath: old.path, isDirectory: isDirectory), stamps: stamps)
    }

    private func rebaseWatch(from old: HashedPath, to new: HashedPath) {
        guard let watch = watchOf.removeValue(forKey: old) else { return }
        watchOf[new] = watch
        directories[watch] = new
    }

    // MARK: The root going and coming back

    private func rootGone(_ how: String) {
        let wasDirectory = rootIsDirectory
        disarm()
        let rearm = options.rearmWhenRecreated ? "; watching for it to be created again" : ""
        post(FileChange(kind: .rootDeleted, path: root, isDirectory: wasDirectory,
                        message: "\(root) was \(how)\(rearm)"))
        if options.rearmWhenRecreated { awaitRoot() }
    }

    /// Watches the nearest existing ancestor of the root for the next component of the root's
    /// path to appear, then re-arms (walking down as components appear: `mkdir -p` of several
    /// levels at once is fine).
    private func awaitRoot() {
        var directory = FilePath.parent(of: root)
        while true {
            if FileState(path: directory, following: true)?.isDirectory == true {
                switch monitor.addWatch(directory, following: true, for: self) {
                case .watched(let watch):
                    awaiting = (watch, directory)
                    checkAwaitedRoot()
                    return
                case .failed(let code) where code != ENOENT && code != ENOTDIR:
                    reportWatchFailures([(directory, code)])
                    return
                case .failed:
                    break  // removed meanwhile: try its parent
                }
            }
            if directory == "/" { return }
            directory = FilePath.parent(of: directory)
        }
    }

    /// Re-arms if the root exists now; moves the wait down if a deeper ancestor does.
    private func checkAwaitedRoot() {
        guard let awaiting else { return }
        if FileState(path: root, following: true) != nil {
            monitor.release(awaiting.watch, by: self)
            self.awaiting = nil
            arm(initial: false)
            return
        }
        let next = FilePath.join(awaiting.directory, nextComponent(below: awaiting.directory))
        if next != root, FileState(path: next, following: true)?.isDirectory == true {
            monitor.release(awaiting.watch, by: self)
            self.awaiting = nil
            awaitRoot()
        }
    }

    private func nextComponent(below directory: String) -> String {
        let rest = root.utf8.dropFirst(directory == "/" ? 1 : directory.utf8.count + 1)
        return String(Substring(rest.prefix(while: { $0 != UInt8(ascii: "/") })))
    }

    private func handleWhileAwaiting(_ event: InotifyEvent, name: UnsafeRawBufferPointer) {
        guard let awaiting else { return }
        if name.isEmpty {
            if event.has(InotifyMask.deleteSelf | InotifyMask.moveSelf | InotifyMask.unmount) {
                monitor.release(awaiting.watch, by: self)
                self.awaiting = nil
                awaitRoot()
            }
        } else if event.has(InotifyMask.create | InotifyMask.movedTo),
                  name.elementsEqual(nextComponent(below: awaiting.directory).utf8) {
            checkAwaitedRoot()
        }
    }

    var snapshotCount: Int { snapshot.count }

    // MARK: Overflow

    /// The kernel dropped events: say so, then report what changed against the snapshot. Returns
    /// whether it walked the tree (not when the root is awaited: there is no tree to walk).
    func overflowed() -> Bool {
        guard !overLimit else { return false }  // stopped: nothing to make good
        let limit = readProcInteger("/proc/sys/fs/inotify/max_queued_events").map(String.init) ?? "?"
        post(FileChange(kind: .overflow, path: root, isDirectory: rootIsDirectory, message:
            "the kernel's inotify queue overflowed (fs.inotify.max_queued_events = \(limit)) and events were lost; "
            + "rescanning \(root): what changed follows, then fs.rescanned"))
        var counts = (created: 0, deleted: 0, modified: 0)
        var rescanned = false
        if awaiting != nil {
            checkAwaitedRoot()
        } else if rootWatch != nil {
            counts = rescan()
            if overLimit { return false }  // it said why it stopped instead
            rescanned = true
        }
        post(FileChange(kind: .rescanned, path: root, isDirectory: rootIsDirectory, origin: .rescan, message:
            "rescan of \(root) after overflow: \(counts.created) created, \(counts.deleted) deleted, \(counts.modified) modified; "
            + "a subscriber that lost events can fetch the watch's listing (eventbus files\(options.recursive ? " --recursive" : "") \(root))"))
        return rescanned
    }

    /// Walks the tree again (re-adding watches: the kernel hands back the same watch for a
    /// directory already watched, and a new one for directories whose creation was lost) and
    /// reports the difference with the snapshot.
    private func rescan() -> (created: Int, deleted: Int, modified: Int) {
        guard let state = FileState(path: root, following: true) else {
            rootGone("deleted")
            return (0, 0, 0)
        }
        if state.isDirectory != rootIsDirectory
            || (!state.isDirectory && snapshot[root].map(state.isSameFile) != true) {
            // The root file was replaced (or turned into a directory) while events were lost: its
            // watch is on the old one. Treat it as gone; re-arming, if asked, finds the new one.
            rootGone("replaced")
            return (0, 0, 0)
        }
        let before = snapshot
        // A file changed by events and not stat'ed since: its change is known to be reported
        // when its ctime is older than this.
        let settledBefore = monitor.settledBefore
        let watchesBefore = Set(directories.keys)
        var failures: [(String, Int32)] = []
        if state.isDirectory {
            snapshot.removeAll()
            directories.removeAll()
            watchOf.removeAll()
            rootWatch = addWatch(rootPath, following: true, failures: &failures)
            addTree(rootPath, report: false, failures: &failures)
            if stopIfOverLimit() {
                for watch in watchesBefore { monitor.release(watch, by: self) }
                return (0, 0, 0)
            }
        } else {
            snapshot.removeAll()
            snapshot[root] = state
        }
        for watch in watchesBefore.subtracting(directories.keys) { monitor.release(watch, by: self) }

        var counts = (created: 0, deleted: 0, modified: 0)
        // Deepest first, so a directory's contents go before the directory.
        for (path, old) in before.sorted(by: { $0.path > $1.path }) {
            if let now = snapshot[path], Self.samePath(old, now) { continue }
            post(FileChange(kind: .deleted, path: path, isDirectory: old.isDirectory, origin: .rescan))
            counts.deleted += 1
        }
        // Parents first, so a directory is created before its contents.
        for (path, now) in snapshot.sorted(by: { $0.path < $1.path }) {
            if let old = before[path], Self.samePath(old, now) {
                if !now.isDirectory
                    && (old.identity == nil ? now.isRecent(cutoff: settledBefore) : now.contentDiffers(from: old)) {
                    post(FileChange(kind: .modified, path: path, isDirectory: false, origin: .rescan))
                    counts.modified += 1
                }
            } else {
                post(FileChange(kind: .created, path: path, isDirectory: now.isDirectory, origin: .rescan))
                counts.created += 1
            }
        }
        reportWatchFailures(failures)
        return counts
    }

    /// Whether a rescan sees the same file at a path: the same inode, or — for a path changed by
    /// an event since it was last stat'ed, whose inode is unknown — the same type (a replacement
    /// of such a file while events were lost is reported as `modified`).
    private static func samePath(_ old: FileState, _ now: FileState) -> Bool {
        old.identity == nil ? old.isDirectory == now.isDirectory : old.isSameFile(as: now)
    }

    // MARK: Posting

    /// Posts a change found otherwise than by an event of the read being handled (a scan, a
    /// rescan, a notice): it carries the time it is posted.
    private func post(_ change: FileChange) {
        guard let bus, !stopped.load(ordering: .acquiring) else { return }
        send(change.kind, change.fields, at: .now(), on: bus, stamps: NoStageStamps())
    }

    /// Posts the change an event of the read being handled reported (see ``send``), telling
    /// `stamps` when it was resolved and what number it got.
    private func post<Stamps: StageStamping>(_ change: FileChange, stamps: Stamps) {
        guard let bus, !stopped.load(ordering: .acquiring) else { return }
        stamps.resolved()
        send(change.kind, change.fields, at: monitor.readTime ?? .now(), on: bus, stamps: stamps)
    }

    /// Posts a change with none of `FileChange`'s optional properties — nearly every event — as
    /// ``post(_:stamps:)`` does (or as ``post(_:)`` for a scan's), without making a `FileChange`
    /// (see `FileChange.fields(path:isDirectory:origin:)`).
    private func post<Stamps: StageStamping>(_ kind: FileChange.Kind, _ path: HashedPath, isDirectory: Bool,
                                             origin: FileChange.Origin = .event, stamps: Stamps) {
        guard let bus, !stopped.load(ordering: .acquiring) else { return }
        stamps.resolved()
        let time: FileChangeMonitor.ReadTime = origin == .scan ? .now() : monitor.readTime ?? .now()
        send(kind, FileChange.fields(path: path.path, isDirectory: isDirectory, origin: origin), at: time,
             on: bus, stamps: stamps)
    }

    /// An event reported by the kernel carries the time the read that returned it came back,
    /// shared by every event of that read: the change happened before it, and a clock read per
    /// read instead of two per event (wall and monotonic) is ~5 % of the read path's CPU in a
    /// storm (`perf`, files benchmark). A scan's finding carries the time it is posted: the
    /// scan may find what was made after the read.
    private func send<Stamps: StageStamping>(_ kind: FileChange.Kind, _ fields: [String: FieldValue],
                                             at time: FileChangeMonitor.ReadTime, on bus: Bus, stamps: Stamps) {
        lastSequence = bus.post(Event(name: kind.eventName, source: id, fields: fields, wallTime: time.wall,
                                      monotonicNanoseconds: time.monotonic))
        stamps.posted(sequence: lastSequence)
    }

    // MARK: Listing

    /// What the snapshot holds under the root, as of the last event posted (on the queue: no
    /// event is posted meanwhile). Costs the tree.
    func listing() -> FileListing {
        var entries: [FileListing.Entry]
        if rootWatch == nil {
            entries = []
        } else if rootIsDirectory {
            entries = snapshot.entries(below: root).map { FileListing.Entry(path: $0.path, isDirectory: $0.state.isDirectory) }
            entries.sort { $0.path < $1.path }
        } else {
            entries = [FileListing.Entry(path: root, isDirectory: false)]
        }
        return FileListing(root: root, source: id, sequence: lastSequence, rootExists: rootWatch != nil, entries: entries,
                           exceededEntryLimit: overLimit ? options.entryLimit : nil)
    }
}
