import EventBusKit
@testable import EventSources
import Foundation
import Synchronization
import Testing
#if canImport(Glibc)
import Glibc
#endif

// The file source at scale: folder operations cost their subtree, a rescan reports
// only what changed, and a subscriber that lost events becomes whole again from the listing.
// In FileSourceTests' suite, which is serialized: its limit tests lower system-wide sysctls.
extension FileSourceTests {
    @Test func folderRenameAndRemovalVisitOnlyTheirSubtree() async throws {
        let scratch = try fileScratch()
        let outside = try fileScratch()
        // 150 folders of 1000 files, and a small folder of 10 files and a subfolder of 5.
        let tree = scratch.at("tree")
        fileMkdir(tree)
        for folder in 0..<150 {
            fileMkdir("\(tree)/d\(folder)")
            for file in 0..<1000 { fileTouch("\(tree)/d\(folder)/f\(file)") }
        }
        fileMkdir(scratch.at("small"))
        for file in 0..<10 { fileTouch(scratch.at("small/f\(file)")) }
        fileMkdir(scratch.at("small/sub"))
        for file in 0..<5 { fileTouch(scratch.at("small/sub/g\(file)")) }
        let harness = FileWatchHarness()
        let watch = try FileWatch(path: scratch.path, recursive: true)
        let recorder = try harness.subscribe(watch)
        let below = 16  // what lies below `small`
        #expect(harness.monitor.folderWork.paths == 1 + 150 + 150_000 + 1 + below)
        #expect(harness.monitor.folderWork.visited == 0)

        fileRename(scratch.at("small"), scratch.at("renamed"))
        #expect(await eventually { recorder.contains(.moved, scratch.at("renamed")) })
        #expect(harness.monitor.folderWork.visited == below)
        // The moved folder's watches and entries are under the new path.
        fileTouch(scratch.at("renamed/sub/new"))
        #expect(await eventually { recorder.contains(.created, scratch.at("renamed/sub/new")) })
        let listing = try #require(harness.monitor.listing(of: watch))
        let renamed = listing.entries.filter { $0.path.hasPrefix(scratch.at("renamed/")) }.map(\.path)
        #expect(Set(renamed) == Set((0..<10).map { scratch.at("renamed/f\($0)") } + [scratch.at("renamed/sub")]
            + (0..<5).map { scratch.at("renamed/sub/g\($0)") } + [scratch.at("renamed/sub/new")]))
        #expect(!listing.entries.contains { $0.path.hasPrefix(scratch.at("small")) })

        // Moved out of the watch: removed with everything below it.
        fileRename(scratch.at("renamed"), outside.at("gone"))
        #expect(await eventually { recorder.contains(.deleted, scratch.at("renamed")) })
        #expect(harness.monitor.folderWork.visited == below + below + 1)
        #expect(harness.monitor.folderWork.paths == 1 + 150 + 150_000)
        // Its watches are released: 1 root + tree + 150 folders remain.
        #expect(await eventually { harness.kernelWatchLines == 152 })
    }

    @Test func rescanAfterARealOverflowReportsOnlyWhatChanged() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        let recorder = try harness.subscribe(FileWatch(path: scratch.path))
        let queued = try #require(readProcInteger("/proc/sys/fs/inotify/max_queued_events"))
        // Made while watched: known by events only, and settled once the queue has been quiet.
        let stable = (0..<200).map { scratch.at("stable\($0)") }
        for file in stable { fileWrite(file, "same") }
        let written = scratch.at("written"), grown = scratch.at("grown"), touchedBack = scratch.at("touched-back")
        for file in [written, grown, touchedBack] { fileWrite(file, "before") }
        #expect(await eventually { recorder.paths(.created).count == 203 && harness.monitor.changesSettled })

        harness.monitor.pauseReading()
        for i in 0...queued { fileTouch(scratch.at("filler\(i % 100)")) }  // overflow: later events are lost
        fileWrite(written, "after!")  // same size, new mtime
        fileWrite(grown, "before and after")
        // Rewritten with its mtime put back: only ctime tells.
        var times = stat()
        stat(touchedBack, &times)
        fileWrite(touchedBack, "BEFORE")
        var restore = [times.st_atim, times.st_mtim]
        #expect(utimensat(AT_FDCWD, touchedBack, &restore, 0) == 0)
        harness.monitor.resumeReading()

        #expect(await eventually { recorder.contains(.rescanned, scratch.path) })
        let all = recorder.all
        let overflow = try #require(all.firstIndex { $0.kind == .overflow })
        let rescanned = try #require(all.firstIndex { $0.kind == .rescanned })
        let modified = Set(all[overflow..<rescanned].filter { $0.kind == .modified }.map(\.path))
        #expect(modified.isSuperset(of: [written, grown, touchedBack]))
        #expect(modified.isDisjoint(with: stable), "unchanged files are not reported")
    }

    @Test func aSlowSubscriberBecomesWholeAgainFromTheListing() async throws {
        let scratch = try fileScratch()
        for folder in 0..<10 {
            fileMkdir(scratch.at("d\(folder)"))
            for file in 0..<200 { fileTouch(scratch.at("d\(folder)/f\(file)")) }
        }
        let harness = FileWatchHarness()
        let watch = try FileWatch(path: scratch.path, recursive: true)
        let fast = try harness.subscribe(watch)
        let slow = SlowFileSubscriber()
        try harness.bus.files(watch).bufferLimit(8).receive(subscriber: slow)
        let queued = try #require(readProcInteger("/proc/sys/fs/inotify/max_queued_events"))
        // A client starts from the listing, then applies what follows it.
        var picture = FilePicture(try #require(harness.monitor.listing(of: watch)))

        harness.monitor.pauseReading()
        for file in 0..<200 { unlink(scratch.at("d3/f\(file)")) }
        rmdir(scratch.at("d3"))
        fileMkdir(scratch.at("new"))
        for file in 0..<300 { fileTouch(scratch.at("new/f\(file)")) }
        for i in 0...queued { fileTouch(scratch.at("filler\(i % 100)")) }
        for file in 0..<100 { unlink(scratch.at("d5/f\(file)")) }  // lost: found by the rescan
        harness.monitor.resumeReading()
        #expect(await eventually { fast.contains(.rescanned, scratch.path) })
        fileRename(scratch.at("d4"), scratch.at("d4-renamed"))
        let marker = scratch.at("marker")
        fileTouch(marker)
        #expect(await eventually { fast.contains(.created, marker) })

        // The slow client reads one event at a time; its buffer of 8 dropped the rest.
        var gaps = 0
        let reconciled = await eventually {
            guard let event = slow.next() else { return false }
            if event.gap != nil {
                gaps += 1
                if let listing = harness.monitor.listing(of: watch) { picture = FilePicture(listing) }
            } else {
                picture.apply(event)
            }
            return picture.paths[marker] != nil && !slow.hasPending
        }
        #expect(reconciled)
        #expect(gaps > 0, "the drops were announced")
        #expect(picture.paths == FilePicture.disk(scratch.path))
        slow.cancel()
        fast.cancel()
    }
}

/// A subscriber that asks for one event at a time, when the test takes the previous one: its
/// buffer fills and the bus drops (and announces) what does not fit.
final class SlowFileSubscriber: Subscriber, @unchecked Sendable {
    private let lock = NSLock()
    private var subscription: Subscription?
    private var inbox: [Event] = []
    private var asked = false

    func receive(subscription: Subscription) {
        lock.withLock { self.subscription = subscription }
    }

    func receive(_ input: Event) -> Subscribers.Demand {
        lock.withLock {
            inbox.append(input)
            asked = false
        }
        return .none
    }

    func receive(completion: Subscribers.Completion<Never>) {}

    /// The event received, if any; else asks for one (once).
    func next() -> Event? {
        let (event, ask) = lock.withLock { () -> (Event?, Subscription?) in
            if !inbox.isEmpty { return (inbox.removeFirst(), nil) }
            if asked { return (nil, nil) }
            asked = true
            return (nil, subscription)
        }
        ask?.request(.max(1))
        return event
    }

    /// Whether an asked-for event has not arrived yet or one waits in the inbox.
    var hasPending: Bool { lock.withLock { !inbox.isEmpty || asked } }

    func cancel() {
        lock.withLock { subscription }?.cancel()
    }
}

/// A client's picture of a watched tree: path → is a directory, from a listing and the events
/// that follow it (those the listing holds already are skipped by sequence).
struct FilePicture {
    var paths: [String: Bool] = [:]
    var sequence: UInt64

    init(_ listing: FileListing) {
        for entry in listing.entries { paths[entry.path] = entry.isDirectory }
        sequence = listing.sequence
    }

    mutating func apply(_ event: Event) {
        guard event.sequence > sequence, let change = event.fileChange else { return }
        sequence = event.sequence
        switch change.kind {
        case .created:
            paths[change.path] = change.isDirectory
        case .deleted:
            paths[change.path] = nil
            if change.isDirectory { paths = paths.filter { !$0.key.hasPrefix(change.path + "/") } }
        case .moved:
            guard let old = change.oldPath else { return }
            paths[old] = nil
            paths[change.path] = change.isDirectory
            if change.isDirectory {
                for (path, isDirectory) in paths where path.hasPrefix(old + "/") {
                    paths[path] = nil
                    paths[change.path + path.dropFirst(old.count)] = isDirectory
                }
            }
        default:
            break
        }
    }

    /// What the disk holds under `root`.
    static func disk(_ root: String) -> [String: Bool] {
        var found: [String: Bool] = [:]
        for relative in (try? FileManager.default.subpathsOfDirectory(atPath: root)) ?? [] {
            var info = stat()
            guard lstat(root + "/" + relative, &info) == 0 else { continue }
            found[root + "/" + relative] = (info.st_mode & S_IFMT) == S_IFDIR
        }
        return found
    }
}
