@testable import EventBusHost
import EventBusKit
import ModuleIsolation
import Testing

/// Reload planning, rule by rule.
@Suite struct ModulePlanTests {
    func entry(_ name: String, path: String = "/m.so", enabled: Bool = true, capacity: Int? = nil,
               config: [String: ConfigValue] = [:], isolation: IsolationMode = .none) -> ModuleEntry {
        var entry = ModuleEntry(name: name, path: path, enabled: enabled, mailboxCapacity: capacity,
                                config: ModuleConfig(config), location: "test")
        entry.isolation = isolation
        return entry
    }

    func current(_ entry: ModuleEntry, active: Bool = true, capacity: Int = 10) -> ModulePlan.Current {
        ModulePlan.Current(entry: entry, isActive: active, mailbox: limits(capacity))
    }

    func limits(_ events: Int) -> MailboxLimits { MailboxLimits(events: events, bytes: 1 << 20) }

    @Test func unchangedModulesAreLeftAlone() {
        let a = entry("a")
        #expect(ModulePlan.actions(current: ["a": current(a)], desired: [a], defaultMailbox: limits(10)).isEmpty)
    }

    @Test func stopsComeBeforeChangesAndStarts() {
        let actions = ModulePlan.actions(
            current: ["old": current(entry("old")), "a": current(entry("a", config: ["x": .int(1)]))],
            desired: [entry("new"), entry("a", config: ["x": .int(2)])],
            defaultMailbox: limits(10))
        #expect(actions == [.stop(name: "old", removed: true), .reconfigure(name: "a"), .start(name: "new")])
    }

    @Test func disablingStopsAndReEnablingStarts() {
        #expect(ModulePlan.actions(current: ["a": current(entry("a"))], desired: [entry("a", enabled: false)],
                                   defaultMailbox: limits(10)) == [.stop(name: "a", removed: false)])
        #expect(ModulePlan.actions(current: ["a": current(entry("a", enabled: false), active: false)],
                                   desired: [entry("a")], defaultMailbox: limits(10)) == [.start(name: "a")])
        // Still disabled: nothing to do.
        #expect(ModulePlan.actions(current: ["a": current(entry("a", enabled: false), active: false)],
                                   desired: [entry("a", enabled: false)], defaultMailbox: limits(10)).isEmpty)
    }

    @Test func aRefusedModuleIsRetried() {
        #expect(ModulePlan.actions(current: ["a": current(entry("a"), active: false)], desired: [entry("a")],
                                   defaultMailbox: limits(10)) == [.start(name: "a")])
    }

    @Test func aChangedPathOrCapacityOfARunningModuleNeedsARestart() {
        let actions = ModulePlan.actions(current: ["a": current(entry("a"), capacity: 10)],
                                         desired: [entry("a", path: "/n.so", capacity: 20)], defaultMailbox: limits(10))
        #expect(actions == [.restartNeededForPath(name: "a", running: "/m.so", configured: "/n.so"),
                            .restartNeededForCapacity(name: "a")])
        // The default capacity changing counts too.
        #expect(ModulePlan.actions(current: ["a": current(entry("a"), capacity: 10)], desired: [entry("a")],
                                   defaultMailbox: limits(50)) == [.restartNeededForCapacity(name: "a")])
        // So do the bytes, the module's own or the default.
        var bytes = entry("a")
        bytes.mailboxBytes = 2 << 20
        #expect(ModulePlan.actions(current: ["a": current(entry("a"))], desired: [bytes],
                                   defaultMailbox: limits(10)) == [.restartNeededForCapacity(name: "a")])
        #expect(ModulePlan.actions(current: ["a": current(entry("a"))], desired: [entry("a")],
                                   defaultMailbox: MailboxLimits(events: 10, bytes: 3 << 20)) == [.restartNeededForCapacity(name: "a")])
    }

    @Test func aModuleFileReplacedInPlaceRestartsItsWorkerAndIsReportedInEventbusd() {
        var worker = current(entry("a", isolation: .process))
        worker.fileChanged = true
        #expect(ModulePlan.actions(current: ["a": worker], desired: [entry("a", isolation: .process)], defaultMailbox: limits(10))
                == [.restart(name: "a", reason: "its file /m.so was replaced since it was loaded")])
        var inProcess = current(entry("a"))
        inProcess.fileChanged = true
        #expect(ModulePlan.actions(current: ["a": inProcess], desired: [entry("a")], defaultMailbox: limits(10))
                == [.restartNeededForFile(name: "a", path: "/m.so")])
        // A new path says so: the old file changing does not matter then.
        #expect(ModulePlan.actions(current: ["a": inProcess], desired: [entry("a", path: "/n.so")], defaultMailbox: limits(10))
                == [.restartNeededForPath(name: "a", running: "/m.so", configured: "/n.so")])
    }

    @Test func aWorkerIsRestartedForANewPathIsolationOrWorkerSettings() {
        let running = entry("a", isolation: .process)
        #expect(ModulePlan.actions(current: ["a": current(running)], desired: [entry("a", path: "/n.so", isolation: .process)],
                                   defaultMailbox: limits(10)) == [.restart(name: "a", reason: "path changed from /m.so to /n.so")])
        #expect(ModulePlan.actions(current: ["a": current(running)], desired: [entry("a", isolation: .none)],
                                   defaultMailbox: limits(10)) == [.restart(name: "a", reason: "isolation changed from process to none")])
        var limited = entry("a", isolation: .process)
        limited.worker.openFilesLimit = 64
        #expect(ModulePlan.actions(current: ["a": current(running)], desired: [limited],
                                   defaultMailbox: limits(10)) == [.restart(name: "a", reason: "worker settings changed")])
        // A new config section alone is still the module's to apply.
        #expect(ModulePlan.actions(current: ["a": current(running)], desired: [entry("a", config: ["k": .int(1)], isolation: .process)],
                                   defaultMailbox: limits(10)) == [.reconfigure(name: "a")])
    }
}
