import EventBusKit
import Foundation
import Testing

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

    @Test(arguments: [
        ["equals": ConfigValue.string("x")],
        ["field": .string("a"), "equals": .string("x"), "contains": .string("y")],
        ["debounce_ms": .int(-1)],
        ["target": .int(1)],
    ])
    func refusesInconsistentConfig(_ config: [String: ConfigValue]) throws {
        let harness = try follower(config)
        #expect { try harness.activate() } throws: { ($0 as? EventBusError)?.code == .invalidModuleConfig }
    }
}
