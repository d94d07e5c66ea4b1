@testable import EventBusHost
import EventBusKit
import Foundation
import Testing
import TestSupport

/// Posts counted by the kind of source and notices by name: every built-in source kind has its
/// own label (a kind without one would be counted as a module's posts), imports apart.
@Suite struct PostCountsTests {
    @Test func eachSourceKindAndNoticeIsCountedUnderItsOwnLabel() async throws {
        let bus = Bus()
        let counts = PostCounts()
        counts.start(on: bus)
        defer { counts.stop() }
        let posts: [(source: String, name: String, kind: String)] = [
            ("units:system:*.service", "unit.state", "units"),
            ("units:system:*.service", "units.gap", "units"),
            ("devices:net", "device.add", "devices"),
            ("devices:net", "devices.gap", "devices"),
            ("timer:every 1s", "timer.tick", "timer"),
            ("files:/etc", "fs.overflow", "files"),
            ("journal:unit=a", "journal.gap", "journal"),
            ("user", "user.hello", "user"),
            ("alerts", "alert.raised", "module"),
            ("rules", "rule.skipped", "rules"),
            ("rule:disk-alert", "alert.disk", "rules"),
        ]
        for post in posts { _ = bus.post(post.name, source: post.source) }
        // An import: counted as imported whatever kind the remote host claims.
        _ = bus.post("units.gap", source: "units:system:*", fields: ["@origin.host": "far", "@origin.instance": 1, "@origin.sequence": 1])
        let settled = await eventually { counts.postedByKind.reduce(0) { $0 + $1.count } == UInt64(posts.count + 1) }
        try #require(settled)
        let byKind = Dictionary(uniqueKeysWithValues: counts.postedByKind.map { ($0.kind, $0.count) })
        #expect(byKind == ["units": 2, "devices": 2, "timer": 1, "files": 1, "journal": 1, "user": 1, "module": 1, "imported": 1,
                           "bridge": 0, "eventbusd": 0, "bus": 0, "rules": 2, "dbus": 0])
        let notices = Dictionary(uniqueKeysWithValues: counts.noticesByName.map { ($0.name, $0.count) })
        #expect(notices["units.gap"] == 1 && notices["devices.gap"] == 1 && notices["fs.overflow"] == 1 && notices["journal.gap"] == 1
                && notices["rule.skipped"] == 1)
        #expect(Dictionary(uniqueKeysWithValues: counts.importedNoticesByName.map { ($0.name, $0.count) })["units.gap"] == 1)
    }

    /// The notice lookup tells names apart by their last byte before comparing: each notice is
    /// still found, and names that end like one but are not are not counted.
    @Test func noticesAreFoundByNameAndNothingElseIs() {
        for (index, name) in PostCounts.notices.enumerated() { #expect(PostCounts.notice(named: name) == index, "\(name)") }
        for name in ["", "p", "user.hello", "bench.tail", "a.gap", "journal.gapp", "fs.errorr", "module.crashe", "units.ga"] {
            #expect(PostCounts.notice(named: name) == nil, "\(name)")
        }
    }
}
