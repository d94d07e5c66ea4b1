import EventBusKit
@testable import EventSources
import SystemdBus
import Testing

/// The rules that turn systemd's signals into transitions (``UnitTable``), fed the property sets
/// systemd sends, without D-Bus. The same rules against a real systemd: ProductionTests' Units.
struct UnitTableTests {
    private func unit(_ active: String, _ sub: String, invocation: [UInt8]? = nil) -> [String: PropertyValue] {
        var properties: [String: PropertyValue] = ["ActiveState": .string(active), "SubState": .string(sub),
                                                   "StateChangeTimestamp": .unsigned(1_000), "StateChangeTimestampMonotonic": .unsigned(5)]
        if let invocation { properties["InvocationID"] = .bytes(invocation) }
        return properties
    }

    @Test func repeatedStatesAreNotTransitions() {
        var table = UnitTable()
        let first = table.applyUnitProperties(unit: "a.service", unit("activating", "start"))
        #expect(first?.old == .unloaded && first?.new.activeState == "activating" && first?.origin == .change)
        #expect(table.applyUnitProperties(unit: "a.service", unit("activating", "start")) == nil)
        let running = table.applyUnitProperties(unit: "a.service", unit("active", "running"))
        #expect(running?.old?.subState == "start" && running?.new.subState == "running")
        #expect(table.applyUnitProperties(unit: "a.service", unit("active", "running")) == nil)
    }

    @Test func theTypeSignalBeforeTheUnitSignalGoesWithItsTransition() {
        var table = UnitTable()
        _ = table.applyUnitProperties(unit: "a.service", unit("active", "running", invocation: [0xab, 0x01]))
        table.applyTypeProperties(unit: "a.service", ["Result": .string("exit-code"), "ExecMainCode": .int(1), "ExecMainStatus": .int(3)])
        let failed = table.applyUnitProperties(unit: "a.service", unit("failed", "failed", invocation: [0xab, 0x01]))
        #expect(failed?.new.result == "exit-code" && failed?.new.execMainCode == 1 && failed?.new.execMainStatus == 3)
        #expect(failed?.new.invocationID == "ab01")
        #expect(failed?.old?.result == nil && failed?.old?.activeState == "active")
        #expect(failed?.changedAtMicroseconds == 1_000 && failed?.changedAtMonotonicMicroseconds == 5)
        #expect(failed?.failed == true)
    }

    @Test func aListingUnderWayTakesTheSignalsQuietlyAndReportsTheDifference() {
        var table = UnitTable()
        _ = table.applyUnitProperties(unit: "a.service", unit("active", "running"))
        _ = table.applyUnitProperties(unit: "b.service", unit("active", "running"))
        // Blind: a.service failed, b.service went away, c.service appeared; a signal heard
        // while the listing was on its way is applied without being announced.
        #expect(table.applyUnitProperties(unit: "a.service", unit("deactivating", "stop"), announce: false) == nil)
        let changes = table.resync(with: [
            "a.service": .init(activeState: "failed", subState: "failed", loadState: "loaded"),
            "c.service": .init(activeState: "active", subState: "exited", loadState: "loaded"),
            "d.service": .init(activeState: "inactive", subState: "dead", loadState: "loaded"),
        ])
        #expect(changes.map(\.unit) == ["a.service", "b.service", "c.service"])
        #expect(changes.allSatisfy { $0.origin == .resync })
        #expect(changes[0].old?.activeState == "active" && changes[0].new.activeState == "failed")
        #expect(changes[1].new == .unloaded)
        #expect(changes[2].old == .unloaded && changes[2].new.subState == "exited")
        // Announced now: the same states again are no transitions.
        #expect(table.applyUnitProperties(unit: "a.service", unit("failed", "failed")) == nil)
        #expect(table.resync(with: [
            "a.service": .init(activeState: "failed", subState: "failed", loadState: "loaded"),
            "c.service": .init(activeState: "active", subState: "exited", loadState: "loaded"),
            "d.service": .init(activeState: "inactive", subState: "dead", loadState: "loaded"),
        ]).isEmpty)
    }

    /// daemon-reload and daemon-reexec send UnitRemoved for every unit, then load them again.
    @Test func aRemovedActiveUnitComesBackWithoutATransition() {
        var table = UnitTable()
        _ = table.applyUnitProperties(unit: "a.service", unit("active", "running"))
        _ = table.applyUnitProperties(unit: "idle.service", unit("inactive", "dead"))
        table.remove(unit: "a.service")
        table.remove(unit: "idle.service")
        #expect(table.snapshot(matching: .all).isEmpty)
        #expect(table.records["idle.service"] == nil)
        #expect(table.applyUnitProperties(unit: "a.service", unit("active", "running")) == nil)
        #expect(table.snapshot(matching: .all).map(\.unit) == ["a.service"])
        // A removed unit the listing no longer has went to unloaded.
        _ = table.applyUnitProperties(unit: "b.service", unit("failed", "failed"))
        table.remove(unit: "b.service")
        let changes = table.resync(with: ["a.service": .init(activeState: "active", subState: "running", loadState: "loaded")])
        #expect(changes.map(\.unit) == ["b.service"] && changes.first?.new == .unloaded)
    }

    @Test func snapshotsFollowTheMatch() {
        var table = UnitTable()
        _ = table.resync(with: [
            "nginx.service": .init(activeState: "active", subState: "running", loadState: "loaded"),
            "app-web.service": .init(activeState: "failed", subState: "failed", loadState: "loaded"),
            "logrotate.timer": .init(activeState: "active", subState: "waiting", loadState: "loaded"),
        ])
        #expect(table.snapshot(matching: .types("timer")).map(\.unit) == ["logrotate.timer"])
        #expect(table.snapshot(matching: .names("app-*", "nginx.service")).map(\.unit) == ["app-web.service", "nginx.service"])
        let all = table.snapshot(matching: .all)
        #expect(all.count == 3 && all.allSatisfy { $0.origin == .snapshot && $0.old == nil })
        #expect(all.first { $0.unit == "nginx.service" }?.new.loadState == "loaded")
    }
}

struct UnitPathTests {
    @Test func namesComeBackFromObjectPaths() {
        #expect(UnitPath.unitName(of: "/org/freedesktop/systemd1/unit/nginx_2eservice") == "nginx.service")
        #expect(UnitPath.unitName(of: "/org/freedesktop/systemd1/unit/app_2dweb_40blue_2eservice") == "app-web@blue.service")
        #expect(UnitPath.unitName(of: "/org/freedesktop/systemd1/unit/_31_2dboot_2etarget") == "1-boot.target")
        #expect(UnitPath.unitName(of: "/org/freedesktop/systemd1/unit/bad_2") == nil)
        #expect(UnitPath.unitName(of: "/org/freedesktop/systemd1/job/12") == nil)
        for name in ["nginx.service", "app-web@blue.service", "1-boot.target", "dev-disk-by\\x2duuid.device", "-.mount"] {
            #expect(UnitPath.unitName(of: UnitPath.path(of: name)) == name)
        }
        #expect(UnitPath.path(of: "nginx.service") == "/org/freedesktop/systemd1/unit/nginx_2eservice")
        #expect(UnitPath.path(of: "1-boot.target") == "/org/freedesktop/systemd1/unit/_31_2dboot_2etarget")
    }
}
