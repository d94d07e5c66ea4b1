import EventBusKit
import EventSources
import Foundation
import Testing
#if canImport(Glibc)
import Glibc
#endif

/// The `follower` module as the root package builds it (`libFollower.so`).
@Suite struct FollowerModuleTests {
    private func follower(_ config: [String: ConfigValue]) throws -> ModuleHarness {
        try ModuleHarness(library: BuildProducts.library("Follower"), config: config)
    }

    private func targets(_ recorder: Recorder) -> [String?] {
        recorder.all.map { $0["target"]?.stringValue }
    }

    @Test func followsTheConfiguredTargetThenTheOneSetByAnEvent() async throws {
        let harness = try follower([
            "target": .string("app.a.*"), "field": .string("level"), "equals": .string("error"),
            "debounce_ms": .int(20),
        ])
        expectLoadedWithOneSDK(harness, name: "follower", type: "Follower.Follower")
        let following = try harness.record("follower.following")
        let matches = try harness.record("follower.match")
        try harness.activate()
        defer { harness.deactivate() }

        #expect(await eventually { following.count == 1 })
        harness.bus.post("app.a.x", fields: ["level": "info"])
        harness.bus.post("app.b.x", fields: ["level": "error"])
        harness.bus.post("app.a.x", fields: ["level": "error", "message": "disk full"])
        #expect(await eventually { matches.count == 1 })

        harness.bus.post("user.follow.set", fields: ["target": "app.b.*"])
        #expect(await eventually { following.count == 2 })
        // The old target's subscription is gone after the switch: this must not match.
        harness.bus.post("app.a.y", fields: ["level": "error"])
        harness.bus.post("app.b.y", fields: ["level": "error"])
        #expect(await eventually { matches.count == 2 })

        #expect(targets(following) == ["app.a.*", "app.b.*"])
        let found = matches.all
        #expect(found.map { $0["matched_name"]?.stringValue } == ["app.a.x", "app.b.y"])
        #expect(found[0]["message"] == "disk full")
        #expect(found[0]["level"] == "error")
        #expect(found.allSatisfy { $0["matched_source"] == "user" && ($0["matched_sequence"]?.intValue ?? 0) > 0 })
    }

    @Test func coalescesABurstOfTargetChangesIntoTheLast() async throws {
        // No initial target. The three changes are posted back to back, well inside the window.
        let harness = try follower(["debounce_ms": .int(2_000)])
        let following = try harness.record("follower.following")
        let matches = try harness.record("follower.match")
        try harness.activate()
        defer { harness.deactivate() }

        harness.bus.post("user.follow.set", fields: ["target": "a.*"])
        harness.bus.post("user.follow.set", fields: ["target": "b.*"])
        harness.bus.post("user.follow.set", fields: ["target": "c.*"])
        #expect(await eventually { following.count >= 1 })
        harness.bus.post("b.one")
        harness.bus.post("c.one")
        #expect(await eventually { matches.count == 1 })

        #expect(targets(following) == ["c.*"])
        #expect(matches.all.map { $0["matched_name"]?.stringValue } == ["c.one"])
    }

    @Test func keepsFollowingWhenARequestIsInvalid() async throws {
        let harness = try follower(["target": .string("app.*"), "field": .string("message"),
                                    "contains": .string("fail"), "debounce_ms": .int(0)])
        let following = try harness.record("follower.following")
        let matches = try harness.record("follower.match")
        try harness.activate()
        defer { harness.deactivate() }
        #expect(await eventually { following.count == 1 })

        harness.bus.post("user.follow.set", fields: ["target": "app..x"])
        harness.bus.post("user.follow.set", fields: ["pattern": "x.*"])
        #expect(await eventually { harness.logged("target refused") && harness.logged("no string field \"target\"") })
        harness.bus.post("app.job", fields: ["message": "it worked"])
        harness.bus.post("app.job", fields: ["message": "it failed"])
        #expect(await eventually { matches.count == 1 })

        #expect(matches.all.first?["message"] == "it failed")
        #expect(targets(following) == ["app.*"])
    }

    @Test func neverFollowsItsOwnOutput() async throws {
        let harness = try follower(["target": .string(">"), "debounce_ms": .int(0)])
        let matches = try harness.record("follower.match")
        try harness.activate()
        defer { harness.deactivate() }
        #expect(await eventually { harness.logged("following >") })

        harness.bus.post("x.one")
        #expect(await eventually { matches.count == 1 })
        // The first match is on the bus now, and so reached the module before this event.
        harness.bus.post("x.two")
        #expect(await eventually { matches.count == 2 })
        #expect(matches.all.map { $0["matched_name"]?.stringValue } == ["x.one", "x.two"])
    }

    // MARK: Targets named by a file; file and journal targets

    /// A bus with the host's file sources on its own monitor: `monitor.statistics` waits for the
    /// monitor's queue, so once a subscription has started a source, reading it means the kernel
    /// watches are armed — no sleeping, no retrying.
    private func followerWithFiles(_ config: [String: ConfigValue]) throws -> (ModuleHarness, FileChangeMonitor) {
        let harness = try follower(config)
        let monitor = FileChangeMonitor()
        FileSources.register(on: harness.bus, monitor: monitor)
        return (harness, monitor)
    }

    @Test func followsWhatTheTargetFileNames() async throws {
        let scratch = try TemporaryDirectory("eventbus-follower", onTmpfs: true)
        let watched = scratch.at("watched")
        try FileManager.default.createDirectory(atPath: watched, withIntermediateDirectories: false)
        let targetFile = scratch.at("target")
        try "\nfile:\(watched)  \n# the rest is ignored\n".write(toFile: targetFile, atomically: false, encoding: .utf8)

        // `target` is only the start: the file's content, read at activation, comes after it.
        let (harness, monitor) = try followerWithFiles([
            "target": .string("app.none"), "target_file": .string(targetFile), "debounce_ms": .int(20),
        ])
        let following = try harness.record("follower.following")
        let matches = try harness.record("follower.match")
        try harness.activate()
        defer { harness.deactivate() }

        #expect(await eventually { following.count == 1 })
        #expect(targets(following) == ["file:\(watched)"])
        _ = monitor.statistics  // both watches (target file, followed folder) are armed now

        // A file appears in the followed folder: its fs.* events are re-posted.
        try "hello".write(toFile: watched + "/one.txt", atomically: false, encoding: .utf8)
        #expect(await eventually { matches.all.contains { $0["matched_name"] == "fs.closed" } })
        let fileMatches = matches.all
        #expect(fileMatches.allSatisfy { ($0["matched_name"]?.stringValue ?? "").hasPrefix("fs.") })
        #expect(fileMatches.allSatisfy { $0["path"] == .string(watched + "/one.txt") })
        #expect(fileMatches.allSatisfy { $0["matched_source"] == .string("files:\(watched) recursive") })

        // Keep the folder's source running from here on (the same options share it), so the test
        // can see the change the module must no longer follow.
        let fileEvents = Recorder()
        fileEvents.cancellable = try harness.bus.files(at: watched, recursive: true).sink { [fileEvents] event in
            fileEvents.events.update { $0.append(event) }
        }

        // Rewrite the target file in place (write, then close): the module switches to a pattern.
        try "app.b.*\n".write(toFile: targetFile, atomically: false, encoding: .utf8)
        #expect(await eventually { following.count == 2 })
        #expect(targets(following) == ["file:\(watched)", "app.b.*"])
        let before = matches.count

        // The folder's changes no longer match; the pattern's events do. The file change is on
        // the bus before the event, so had the old subscription survived, it would match first.
        try "again".write(toFile: watched + "/two.txt", atomically: false, encoding: .utf8)
        #expect(await eventually { fileEvents.all.contains { $0.name == "fs.closed" } })
        harness.bus.post("app.b.x", fields: ["n": 1])
        #expect(await eventually { matches.count == before + 1 })
        #expect(matches.all.dropFirst(before).map { $0["matched_name"]?.stringValue } == ["app.b.x"])

        // Replaced by a rename (an atomic save): the re-armed watch reads the new file.
        try "app.c.*\n".write(toFile: targetFile, atomically: true, encoding: .utf8)
        #expect(await eventually { following.count == 3 })
        #expect(targets(following).last == "app.c.*")
        _ = monitor.statistics
        harness.bus.post("app.c.x")
        #expect(await eventually { matches.count == before + 2 })
        #expect(matches.all.last?["matched_name"] == "app.c.x")
    }

    @Test func keepsTheTargetWhenTheNewOnesSourceFails() async throws {
        let scratch = try TemporaryDirectory("eventbus-follower", onTmpfs: true)
        // A bus with file sources but no journal driver, as on a host without journald support.
        let (harness, _) = try followerWithFiles(["target": .string("app.*"), "debounce_ms": .int(0)])
        let following = try harness.record("follower.following")
        let matches = try harness.record("follower.match")
        try harness.activate()
        defer { harness.deactivate() }
        #expect(await eventually { following.count == 1 })

        harness.bus.post("user.follow.set", fields: ["target": "journal:nginx.service"])
        #expect(await eventually { harness.logged("warning: cannot follow journal:nginx.service, still following app.*") })
        harness.bus.post("user.follow.set", fields: ["target": .string("file:\(scratch.at("missing"))")])
        #expect(await eventually { harness.logged("warning: cannot follow file:\(scratch.at("missing")), still following app.*") })
        harness.bus.post("user.follow.set", fields: ["target": "file:relative/path"])
        #expect(await eventually { harness.logged("warning: target refused, still following app.*") })

        harness.bus.post("app.x")
        #expect(await eventually { matches.count == 1 })
        #expect(matches.all.first?["matched_name"] == "app.x")
        #expect(targets(following) == ["app.*"])
        #expect(harness.logs.value.contains { $0.contains("sourceUnavailable") || $0.contains("no journal source") })
    }

    @Test func readsTheTargetFileOnceWhereFilesCannotBeWatched() async throws {
        let scratch = try TemporaryDirectory("eventbus-follower", onTmpfs: true)
        let targetFile = scratch.at("target")
        try "app.*\n".write(toFile: targetFile, atomically: false, encoding: .utf8)
        // A plain bus: no file sources.
        let harness = try follower(["target_file": .string(targetFile), "debounce_ms": .int(0)])
        let following = try harness.record("follower.following")
        try harness.activate()
        defer { harness.deactivate() }

        #expect(await eventually { following.count == 1 })
        #expect(targets(following) == ["app.*"])
        #expect(harness.logged("warning: cannot watch target_file \(targetFile)"))
    }

    @Test(arguments: [
        ["equals": ConfigValue.string("x")],
        ["field": .string("a"), "equals": .string("x"), "contains": .string("y")],
        ["debounce_ms": .int(-1)],
        ["target": .int(1)],
        ["target_file": .string("relative/target")],
    ])
    func refusesInconsistentConfig(_ config: [String: ConfigValue]) throws {
        let harness = try follower(config)
        #expect { try harness.activate() } throws: { ($0 as? EventBusError)?.code == .invalidModuleConfig }
    }
}
