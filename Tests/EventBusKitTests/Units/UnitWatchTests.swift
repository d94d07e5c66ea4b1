import EventBusKit
import Testing

struct UnitWatchTests {
    @Test func globsMatchAsSystemctlDoes() {
        #expect(UnitMatch.all.matches("anything.service"))
        #expect(UnitMatch.names("nginx.service").matches("nginx.service"))
        #expect(!UnitMatch.names("nginx.service").matches("nginx.socket"))
        #expect(UnitMatch.names("app-*.service").matches("app-web.service"))
        #expect(UnitMatch.names("getty@tty[1-3].service").matches("getty@tty2.service"))
        #expect(!UnitMatch.names("getty@tty[1-3].service").matches("getty@tty4.service"))
        #expect(UnitMatch.types("timer", "socket").matches("logrotate.timer"))
        #expect(!UnitMatch.types("timer").matches("logrotate.service"))
        // Escapes are not special (FNM_NOESCAPE): unit names carry `\x2d`.
        #expect(UnitMatch.names("dev-disk-by\\x2duuid-*.device").matches("dev-disk-by\\x2duuid-1234.device"))
    }

    @Test func equalWatchesHaveOneDescription() {
        let one = UnitWatch(match: UnitMatch(["b.service", "a.service", "a.service"]))
        let other = UnitWatch(match: .names("a.service", "b.service"))
        #expect(one == other && one.description == other.description)
        #expect(one.description == "match=a.service,b.service manager=system")
        #expect(UnitWatch(match: .all, manager: .address("unix:path=/x")).description == "match=* manager=address:unix:path=/x")
    }

    @Test func malformedWatchesAreRefused() throws {
        for watch in [UnitWatch(match: UnitMatch([])), UnitWatch(match: .names("")), UnitWatch(match: .names("nginx service")),
                      UnitWatch(match: .all, manager: .address("/run/systemd/private"))] {
            #expect(throws: EventBusError.self) { try watch.validate() }
            do { try watch.validate() } catch let error as EventBusError { #expect(error.code == .invalidUnitWatch) }
        }
        try UnitWatch(match: .names("app-*.service", "*.timer")).validate()
    }

    @Test func aPlainBusHasNoUnitsSource() {
        #expect(throws: EventBusError.self) { try Bus().units() }
    }

    @Test func typedViewsReadBackWhatTheSourceWrites() {
        let change = UnitStateChange(unit: "a.service", origin: .change,
                                     old: UnitState(activeState: "active", subState: "running", invocationID: "ab"),
                                     new: UnitState(activeState: "failed", subState: "failed", result: "exit-code",
                                                    execMainCode: 1, execMainStatus: 3, invocationID: "ab"),
                                     changedAtMicroseconds: 7, changedAtMonotonicMicroseconds: 9)
        #expect(change.event(source: "units:x").unitState == change)
        let snapshot = UnitStateChange(unit: "b.timer", origin: .snapshot, old: nil, new: UnitState(activeState: "active", subState: "waiting"))
        #expect(snapshot.event(source: "units:x").unitState == snapshot)
        let job = UnitJob(unit: "a.service", id: 42, phase: .finished, type: "restart", result: "done")
        #expect(job.event(source: "units:x").unitJob == job)
        #expect(UnitsGap(reason: "gone").event(source: "s").unitsGap == UnitsGap(reason: "gone"))
        let synced = UnitsSynced(kind: .resync, units: 5, changedUnits: 2)
        #expect(synced.event(source: "s").unitsSynced == synced)
        #expect(job.event(source: "s").unitState == nil && change.event(source: "s").unitJob == nil)
    }
}
