@testable import EventBusHost
import EventBusKit
import Testing

/// Reload planning, rule by rule.
@Suite struct ModulePlanTests {
    func entry(_ name: String, path: String = "/m.so", enabled: Bool = true, capacity: Int? = nil,
               config: [String: ConfigValue] = [:]) -> ModuleEntry {
        ModuleEntry(name: name, path: path, enabled: enabled, mailboxCapacity: capacity,
                    config: ModuleConfig(config), location: "test")
    }

    func current(_ entry: ModuleEntry, active: Bool = true, capacity: Int = 10) -> ModulePlan.Current {
        ModulePlan.Current(entry: entry, isActive: active, mailboxCapacity: capacity)
    }

    @Test func unchangedModulesAreLeftAlone() {
        let a = entry("a")
        #expect(ModulePlan.actions(current: ["a": current(a)], desired: [a], defaultCapacity: 10).isEmpty)
    }

    @Test func stopsComeBeforeChangesAndStarts() {
        let actions = ModulePlan.actions(
            current: ["old": current(entry("old")), "a": current(entry("a", config: ["x": .int(1)]))],
            desired: [entry("new"), entry("a", config: ["x": .int(2)])],
            defaultCapacity: 10)
        #expect(actions == [.stop(name: "old", removed: true), .reconfigure(name: "a"), .start(name: "new")])
    }

    @Test func disablingStopsAndReEnablingStarts() {
        #expect(ModulePlan.actions(current: ["a": current(entry("a"))], desired: [entry("a", enabled: false)],
                                   defaultCapacity: 10) == [.stop(name: "a", removed: false)])
        #expect(ModulePlan.actions(current: ["a": current(entry("a", enabled: false), active: false)],
                                   desired: [entry("a")], defaultCapacity: 10) == [.start(name: "a")])
        // Still disabled: nothing to do.
        #expect(ModulePlan.actions(current: ["a": current(entry("a", enabled: false), active: false)],
                                   desired: [entry("a", enabled: false)], defaultCapacity: 10).isEmpty)
    }

    @Test func aRefusedModuleIsRetried() {
        #expect(ModulePlan.actions(current: ["a": current(entry("a"), active: false)], desired: [entry("a")],
                                   defaultCapacity: 10) == [.start(name: "a")])
    }

    @Test func aChangedPathOrCapacityOfARunningModuleNeedsARestart() {
        let actions = ModulePlan.actions(current: ["a": current(entry("a"), capacity: 10)],
                                         desired: [entry("a", path: "/n.so", capacity: 20)], defaultCapacity: 10)
        #expect(actions == [.restartNeededForPath(name: "a", running: "/m.so", configured: "/n.so"),
                            .restartNeededForCapacity(name: "a")])
        // The default capacity changing counts too.
        #expect(ModulePlan.actions(current: ["a": current(entry("a"), capacity: 10)], desired: [entry("a")],
                                   defaultCapacity: 50) == [.restartNeededForCapacity(name: "a")])
    }
}
