import EventBusKit
@testable import EventSources
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// Real inotify on temporary directories. Serialized: the limit tests lower system-wide sysctls
/// for a moment, which must not hit the other file tests.
@Suite(.serialized) struct FileSourceTests {
    @Test func reportsEachKindOfChangeInOrder() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        let recorder = try harness.subscribe(FileWatch(path: scratch.path))
        let f = scratch.at("f"), g = scratch.at("g"), d = scratch.at("d")

        fileWrite(f, "hello")  // created, modified (the write), closed
        chmod(f, 0o600)  // attributes
        fileRename(f, g)  // moved, one event from the MOVED_FROM/MOVED_TO pair
        unlink(g)
        fileMkdir(d)
        rmdir(d)

        #expect(await eventually { recorder.contains(.deleted, d) })
        let seen = recorder.all.map { "\($0.kind) \($0.path.dropFirst(scratch.path.count + 1)) dir=\($0.isDirectory)" }
        #expect(seen == [
            "created f dir=false", "modified f dir=false", "closedAfterWrite f dir=false",
            "attributes f dir=false", "moved g dir=false", "deleted g dir=false",
            "created d dir=true", "deleted d dir=true",
        ])
        #expect(recorder.of(.moved).first?.oldPath == f)
        #expect(recorder.all.allSatisfy { $0.origin == .event })
    }

    @Test func pairsMovesAcrossDirectoriesAndMarksMovesAcrossTheBoundary() async throws {
        let scratch = try fileScratch(), outside = try fileScratch()
        let harness = FileWatchHarness()
        fileMkdir(scratch.at("a"))
        fileMkdir(scratch.at("b"))
        fileWrite(scratch.at("a/x"), "x")
        fileWrite(outside.at("z"), "z")
        let recorder = try harness.subscribe(FileWatch(path: scratch.path, recursive: true))

        fileRename(scratch.at("a/x"), scratch.at("b/y"))  // within the tree, across directories
        fileRename(scratch.at("b/y"), outside.at("y"))  // out of the tree
        fileRename(outside.at("z"), scratch.at("a/z"))  // into the tree

        #expect(await eventually { recorder.contains(.created, scratch.at("a/z")) })
        let moved = try #require(recorder.of(.moved).first)
        #expect(moved.oldPath == scratch.at("a/x"))
        #expect(moved.path == scratch.at("b/y"))
        #expect(recorder.of(.deleted).map { [$0.path, $0.origin.rawValue] } == [[scratch.at("b/y"), "move"]])
        #expect(recorder.of(.created).map { [$0.path, $0.origin.rawValue] } == [[scratch.at("a/z"), "move"]])
    }

    @Test func sourcesShareKernelWatches() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        fileMkdir(scratch.at("sub"))

        let flat = try harness.subscribe(FileWatch(path: scratch.path))
        let deep = try harness.subscribe(FileWatch(path: scratch.path, recursive: true))
        let flatAgain = try harness.subscribe(FileWatch(path: scratch.path))  // the same source as `flat`
        let sub = try harness.subscribe(FileWatch(path: scratch.at("sub")))

        // Three sources, four subscriptions, two directories: two kernel watches.
        #expect(harness.bus.statistics.sources.count == 3)
        #expect(harness.monitor.statistics.kernelWatches == 2)
        #expect(harness.kernelWatchLines == 2)

        fileTouch(scratch.at("f"))
        fileTouch(scratch.at("sub/g"))
        #expect(await eventually {
            flat.contains(.created, scratch.at("f")) && flatAgain.contains(.created, scratch.at("f"))
                && deep.contains(.created, scratch.at("f")) && deep.contains(.created, scratch.at("sub/g"))
                && sub.contains(.created, scratch.at("sub/g"))
        })
        #expect(!flat.contains(.created, scratch.at("sub/g")))

        // A watch goes when its last holder does.
        deep.cancel()
        sub.cancel()
        #expect(await eventually { harness.kernelWatchLines == 1 })
        flat.cancel()
        #expect(harness.kernelWatchLines == 1)  // `flatAgain` still holds the source
        flatAgain.cancel()
        #expect(await eventually { !harness.monitor.statistics.isOpen })
    }

    @Test func recursiveWatchCatchesEverythingInDirectoriesMadeInATightLoop() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        let recorder = try harness.subscribe(FileWatch(path: scratch.path, recursive: true))

        // `mkdir -p r/l1/…/l(depth-1) && touch …/f`, at depths 1–10, with no pause anywhere: the
        // file usually exists before the watch on its directory does.
        var expected: [String] = []
        for round in 0..<10 {
            for depth in 1...10 {
                var path = scratch.at("r\(round)-\(depth)")
                fileMkdir(path)
                expected.append(path)
                for level in 1..<depth {
                    path += "/l\(level)"
                    fileMkdir(path)
                    expected.append(path)
                }
                fileTouch(path + "/f")
                expected.append(path + "/f")
            }
        }
        #expect(await eventually { recorder.paths(.created).isSuperset(of: expected) })
        #expect(recorder.of(.created).count == expected.count, "each path reported once")
        #expect(recorder.paths(.created) == Set(expected))
        // And every directory is watched: a file made now in the deepest one is reported.
        let deepest = expected[expected.count - 2]
        fileTouch(deepest + "/late")
        #expect(await eventually { recorder.contains(.created, deepest + "/late") })
    }

    @Test func movedDirectoriesCarryTheirWatchesAndMovedOutOnesAreDropped() async throws {
        let scratch = try fileScratch(), outside = try fileScratch()
        let harness = FileWatchHarness()
        fileMkdir(scratch.at("a"))
        fileMkdir(scratch.at("a/b"))
        let recorder = try harness.subscribe(FileWatch(path: scratch.path, recursive: true))
        #expect(harness.kernelWatchLines == 3)

        fileRename(scratch.at("a"), scratch.at("c"))
        fileTouch(scratch.at("c/b/f"))
        #expect(await eventually { recorder.contains(.created, scratch.at("c/b/f")) })
        let moved = try #require(recorder.of(.moved).first)
        #expect(moved.oldPath == scratch.at("a") && moved.path == scratch.at("c") && moved.isDirectory)
        let source = try #require(harness.bus.statistics.sources.keys.first)
        #expect(source.hasPrefix("files:"))

        fileRename(scratch.at("c"), outside.at("c"))
        fileTouch(outside.at("c/b/ignored"))
        fileTouch(scratch.at("marker"))
        #expect(await eventually { recorder.contains(.created, scratch.at("marker")) })
        #expect(recorder.of(.deleted).map(\.path) == [scratch.at("c")])
        #expect(!recorder.all.contains { $0.path.hasSuffix("ignored") })
        #expect(harness.kernelWatchLines == 1)
    }

    @Test func overflowIsAnnouncedAndTheRescanReportsEveryMissedFile() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        let recorder = try harness.subscribe(FileWatch(path: scratch.path))
        let queued = try #require(readProcInteger("/proc/sys/fs/inotify/max_queued_events"))

        // Each new file is two events (IN_CREATE, IN_CLOSE_WRITE): the kernel queue overflows.
        harness.monitor.pauseReading()
        let count = queued + 1000
        let files = (0..<count).map { scratch.at("f\($0)") }
        for file in files { fileTouch(file) }
        harness.monitor.resumeReading()

        #expect(await eventually { recorder.contains(.rescanned, scratch.path) })
        let all = recorder.all
        let overflow = try #require(all.firstIndex { $0.kind == .overflow })
        let rescanned = try #require(all.firstIndex { $0.kind == .rescanned })
        #expect(overflow < rescanned)
        #expect(all[overflow].message?.contains("max_queued_events") == true)
        let created = recorder.of(.created)
        #expect(Set(created.map(\.path)) == Set(files))
        #expect(created.count == count, "each file reported once")
        let fromRescan = all[overflow..<rescanned].filter { $0.kind == .created && $0.origin == .rescan }
        #expect(!fromRescan.isEmpty)
        #expect(created.filter { $0.origin == .event }.count + fromRescan.count == count)
        #expect(harness.monitor.statistics.overflows == 1)
        #expect(harness.monitor.statistics.rescans == 1, "one watch, one walk of its tree")

        // Reconciled: changes after the rescan are reported as usual.
        unlink(files[0])
        #expect(await eventually { recorder.contains(.deleted, files[0]) })
    }

    @Test func anOverflowRescansEveryWatchedTreeButNotAnAwaitedRoot() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        fileMkdir(scratch.at("a"))
        fileMkdir(scratch.at("b"))
        let first = try harness.subscribe(FileWatch(path: scratch.at("a")))
        let second = try harness.subscribe(FileWatch(path: scratch.at("b")))
        let awaiting = try harness.subscribe(FileWatch(path: scratch.at("later"), rearmWhenRecreated: true))
        let queued = try #require(readProcInteger("/proc/sys/fs/inotify/max_queued_events"))

        harness.monitor.pauseReading()
        for index in 0..<(queued + 1000) { fileTouch(scratch.at("a/f\(index)")) }
        harness.monitor.resumeReading()

        #expect(await eventually {
            first.contains(.rescanned, scratch.at("a")) && second.contains(.rescanned, scratch.at("b"))
                && awaiting.contains(.rescanned, scratch.at("later"))
        })
        let statistics = harness.monitor.statistics
        #expect(statistics.overflows == 1)
        #expect(statistics.rescans == 2, "a and b walked; the awaited root has no tree to walk")
    }

    @Test func rescanReportsDeletionsAndModificationsAgainstTheSnapshot() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        fileWrite(scratch.at("keep"), "1")
        fileWrite(scratch.at("change"), "1")
        fileWrite(scratch.at("remove"), "1")
        let recorder = try harness.subscribe(FileWatch(path: scratch.path))
        let queued = try #require(readProcInteger("/proc/sys/fs/inotify/max_queued_events"))

        harness.monitor.pauseReading()
        for i in 0...queued { fileTouch(scratch.at("filler\(i % 100)")) }  // overflow: 2 events each, duplicates not merged
        fileWrite(scratch.at("change"), "22")
        unlink(scratch.at("remove"))
        harness.monitor.resumeReading()

        #expect(await eventually { recorder.contains(.rescanned, scratch.path) })
        let all = recorder.all
        let overflow = try #require(all.firstIndex { $0.kind == .overflow })
        let fromRescan = all[overflow...].filter { $0.origin == .rescan && $0.kind.isPathChange }
        #expect(fromRescan.contains { $0.kind == .deleted && $0.path == scratch.at("remove") })
        #expect(fromRescan.contains { $0.kind == .modified && $0.path == scratch.at("change") })
        #expect(!all.contains { $0.path == scratch.at("keep") })
    }

    @Test func watchLimitIsReportedWithTheSysctlAndExistingWatchesKeepWorking() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        fileMkdir(scratch.at("existing"))
        let recorder = try harness.subscribe(FileWatch(path: scratch.path, recursive: true))
        let path = "/proc/sys/fs/inotify/max_user_watches"

        do {
            // Every root process shares this limit: keep the window to the one failing add.
            let old = try fileSetSysctl(path, 1)
            defer { _ = try? fileSetSysctl(path, old) }
            fileMkdir(scratch.at("new"))
            #expect(await eventually { !recorder.of(.error).isEmpty })
        }
        let error = try #require(recorder.of(.error).first)
        #expect(error.limit == .maxUserWatches)
        #expect(error.errorNumber == ENOSPC)
        #expect(error.path == scratch.at("new"))
        #expect(error.message?.contains("fs.inotify.max_user_watches") == true)
        #expect(recorder.contains(.created, scratch.at("new")))

        fileTouch(scratch.at("existing/f"))
        fileTouch(scratch.at("g"))
        #expect(await eventually {
            recorder.contains(.created, scratch.at("existing/f")) && recorder.contains(.created, scratch.at("g"))
        })
    }

    @Test func instanceLimitIsReportedWithTheSysctl() async throws {
        let scratch = try fileScratch()
        let holder = FileWatchHarness()  // holds an instance, so the user is at the lowered limit
        let held = try holder.subscribe(FileWatch(path: scratch.path))
        let harness = FileWatchHarness()
        let path = "/proc/sys/fs/inotify/max_user_instances"

        var recorder: FileRecorder?
        do {
            let old = try fileSetSysctl(path, 1)
            defer { _ = try? fileSetSysctl(path, old) }
            recorder = try harness.subscribe(FileWatch(path: scratch.path))  // armed (or failed) on return
        }
        let error = try #require(recorder?.of(.error).first)
        #expect(error.limit == .maxUserInstances)
        #expect(error.errorNumber == EMFILE)
        #expect(error.message?.contains("fs.inotify.max_user_instances") == true)

        // Raised again: a new subscription gets an instance.
        recorder?.cancel()
        #expect(await eventually { harness.monitor.statistics.sources == 0 })
        let again = try harness.subscribe(FileWatch(path: scratch.path))
        fileTouch(scratch.at("f"))
        #expect(await eventually { again.contains(.created, scratch.at("f")) && held.contains(.created, scratch.at("f")) })
    }

    @Test func deletedRootIsReportedAndReArmedWhenRecreated() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        let root = scratch.at("p/root")
        try FileManager.default.createDirectory(atPath: root + "/sub", withIntermediateDirectories: true)
        let recorder = try harness.subscribe(FileWatch(path: root, recursive: true, rearmWhenRecreated: true))

        try FileManager.default.removeItem(atPath: scratch.at("p"))
        #expect(await eventually { recorder.contains(.rootDeleted, root) })
        // Waiting on the nearest existing ancestor: one watch, on the scratch directory.
        #expect(await eventually { harness.kernelWatchLines == 1 })

        try FileManager.default.createDirectory(atPath: root + "/again", withIntermediateDirectories: true)
        fileTouch(root + "/again/f")
        #expect(await eventually { recorder.contains(.rootRearmed, root) && recorder.contains(.created, root + "/again/f") })
        fileTouch(root + "/g")
        #expect(await eventually { recorder.contains(.created, root + "/g") })
        let all = recorder.all
        let rearmed = try #require(all.firstIndex { $0.kind == .rootRearmed })
        #expect(all[rearmed...].contains { $0.kind == .created && $0.path == root + "/again" })
        #expect(harness.kernelWatchLines == 2)  // root and root/again
    }

    @Test func deletedRootWithoutReArmingGoesQuiet() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        let root = scratch.at("root")
        fileMkdir(root)
        let recorder = try harness.subscribe(FileWatch(path: root))
        rmdir(root)
        #expect(await eventually { recorder.contains(.rootDeleted, root) })
        #expect(await eventually { harness.monitor.statistics.kernelWatches == 0 })
        fileMkdir(root)
        fileTouch(root + "/f")
        #expect(recorder.all.map(\.kind) == [.rootDeleted])
    }

    /// A watch with an entry limit: within it, an ordinary watch; one entry past it (by the first
    /// scan, or by a tree that grows), an `fs.error` that says so, and the watch lets go of its
    /// kernel watches and entries and reports nothing more.
    @Test func aTreePastTheWatchsEntryLimitStopsTheWatchAndSaysSo() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        let root = scratch.at("tree")
        fileMkdir(root)
        for d in 0..<4 {
            fileMkdir(root + "/d\(d)")
            for f in 0..<4 { fileTouch(root + "/d\(d)/f\(f)") }
        }
        // 4 directories and 16 files: 20 entries.
        let growing = try harness.subscribe(FileWatch(path: root, recursive: true, entryLimit: 24))
        let tooSmall = try harness.subscribe(FileWatch(path: root, recursive: true, entryLimit: 19))
        #expect(await eventually { tooSmall.of(.error).count == 1 })
        let refusal = try #require(tooSmall.of(.error).first)
        #expect(refusal.path == root)
        #expect(refusal.message?.contains("holds more than 19 files and directories, the limit of this watch; it has stopped") == true,
                "\(refusal)")

        fileTouch(root + "/d0/new")
        #expect(await eventually { growing.contains(.created, root + "/d0/new") })
        fileMkdir(root + "/d9")  // the 22nd entry, then four more inside: over 24
        for f in 0..<4 { fileTouch(root + "/d9/f\(f)") }
        #expect(await eventually { growing.of(.error).count == 1 })
        #expect(await eventually { harness.monitor.statistics.kernelWatches == 0 },
                "both watches let go of every kernel watch")
        let before = growing.all.count
        fileTouch(root + "/d1/later")
        fileTouch(root + "/d9/later")
        try await Task.sleep(for: .milliseconds(200))  // room for events that must not come
        #expect(growing.all.count == before)
        #expect(tooSmall.all.map(\.kind) == [.error])
    }

    @Test func aWatchedFileIsFollowedThroughEditorStyleReplacement() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        let file = scratch.at("app.conf")
        fileWrite(file, "a")
        let recorder = try harness.subscribe(FileWatch(path: file, rearmWhenRecreated: true))

        fileWrite(file, "b")
        #expect(await eventually { recorder.contains(.closedAfterWrite, file) })
        fileWrite(scratch.at("app.conf.tmp"), "c")
        fileRename(scratch.at("app.conf.tmp"), file)  // the old inode goes, a new one takes its name
        #expect(await eventually { recorder.contains(.rootRearmed, file) })
        #expect(recorder.contains(.rootDeleted, file))
        #expect(!recorder.all.contains { $0.path.hasSuffix(".tmp") })

        fileWrite(file, "d")
        #expect(await eventually { recorder.of(.closedAfterWrite).count == 2 })
    }

    @Test func missingRootIsAnErrorUnlessWaitedFor() async throws {
        let scratch = try fileScratch()
        let harness = FileWatchHarness()
        let root = scratch.at("later")
        let plain = try harness.subscribe(FileWatch(path: root))
        let waiting = try harness.subscribe(FileWatch(path: root, rearmWhenRecreated: true))
        #expect(plain.of(.error).first?.errorNumber == ENOENT)
        #expect(waiting.of(.error).first?.message?.contains("watching for it") == true)

        fileMkdir(root)
        fileTouch(root + "/f")
        #expect(await eventually { waiting.contains(.created, root + "/f") })
        #expect(plain.all.count == 1)
    }

    @Test func withoutTheHostThereIsNoFilesSource() throws {
        #expect(throws: EventBusError.self) { try Bus().files(at: "/tmp") }
        #expect(throws: EventBusError.self) { try FileWatch(path: "") }
        let watch = try FileWatch(path: "/tmp/./a/../b/", recursive: true, rearmWhenRecreated: true)
        #expect(watch.path == "/tmp/b")
        #expect(watch.description == "/tmp/b recursive rearm")
    }

    @Test func fileChangeRoundTripsThroughEventFields() {
        let change = FileChange(kind: .error, path: "/x", isDirectory: true, origin: .rescan, message: "m",
                                limit: .maxUserWatches, errorNumber: ENOSPC)
        let event = Event(name: change.kind.eventName, source: "files:/x", fields: change.fields)
        #expect(event.fileChange == change)
        #expect(event.fields["sysctl"] == "fs.inotify.max_user_watches")
        for kind in FileChange.Kind.allCases { #expect(FileChange.Kind(eventName: kind.eventName) == kind) }
        #expect(Event(name: "fs.created").fileChange == nil)  // no path: not a file change
    }

    /// The fields start from a shared prebuilt dictionary per origin and type: each change gets
    /// its own path and exactly its own fields, and the shared one is never written.
    @Test func fieldsOfEveryOriginAndTypeAreTheChangesOwn() {
        var earlier: [[String: FieldValue]] = []
        for origin in [FileChange.Origin.event, .move, .scan, .rescan] {
            for isDirectory in [false, true] {
                let change = FileChange(kind: .created, path: "/p/\(origin)/\(isDirectory)", isDirectory: isDirectory, origin: origin)
                let fields = change.fields
                #expect(fields == ["path": .string(change.path), "is_dir": .bool(isDirectory), "origin": .string(origin.rawValue)])
                // What the source posts for a kernel event, made without a FileChange: the same.
                #expect(FileChange.fields(path: change.path, isDirectory: isDirectory, origin: origin) == fields)
                let moved = FileChange(kind: .moved, path: "/q", oldPath: "/p", isDirectory: isDirectory, origin: origin)
                #expect(Event(name: moved.kind.eventName, fields: moved.fields).fileChange == moved)
                earlier.append(fields)
            }
        }
        #expect(Set(earlier.map { $0["path"]!.stringValue! }).count == 8)
        #expect(earlier.allSatisfy { $0.count == 3 })
    }
}
