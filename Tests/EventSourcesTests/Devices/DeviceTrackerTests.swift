import EventBusKit
@testable import EventSources
import Testing

/// The tracker's rules without the OS: each device is reported added once and removed once,
/// whatever mix of listing and queued messages saw it.
@Suite struct DeviceTrackerTests {
    private func device(_ name: String, _ kind: DeviceChange.Kind = .added, origin: DeviceChange.Origin = .event,
                        old: String? = nil, driver: String? = nil) -> DeviceChange {
        DeviceChange(kind: kind, syspath: "/sys/devices/virtual/block/\(name)",
                     oldSyspath: old.map { "/sys/devices/virtual/block/\($0)" }, subsystem: "block",
                     sysname: name, driver: driver, layer: .kernel, origin: origin)
    }

    @Test func aDeviceTheListingSawIsNotAddedAgainByItsQueuedMessage() {
        var tracker = DeviceTracker()
        let snapshot = tracker.start(with: [device("loop1", origin: .snapshot)])
        #expect(snapshot.map(\.sysname) == ["loop1"])
        #expect(snapshot.allSatisfy { $0.origin == .snapshot && $0.kind == .added })
        #expect(tracker.apply(device("loop1")) == nil)
        #expect(tracker.apply(device("loop1", .removed))?.kind == .removed)
        #expect(tracker.apply(device("loop1", .removed)) == nil)
        #expect(tracker.known.isEmpty)
    }

    @Test func aRemoveOfADeviceNobodyWasToldOfIsSuppressed() {
        var tracker = DeviceTracker()
        _ = tracker.start(with: [])
        // Gone before the listing looked: the subscriber never heard of it.
        #expect(tracker.apply(device("loop2", .removed)) == nil)
        // Added after the listing passed: reported, and its removal too.
        #expect(tracker.apply(device("loop3"))?.kind == .added)
        #expect(tracker.apply(device("loop3", .removed))?.kind == .removed)
    }

    @Test func aRemovedAndReaddedDeviceIsReportedBothWays() {
        var tracker = DeviceTracker()
        _ = tracker.start(with: [device("loop4", origin: .snapshot)])
        #expect(tracker.apply(device("loop4", .removed)) != nil)
        #expect(tracker.apply(device("loop4")) != nil)
        #expect(tracker.known.keys.contains("/sys/devices/virtual/block/loop4"))
    }

    @Test func movesFollowTheOldPathOrAreSuppressedWhenTheListingSawTheNewOne() {
        var tracker = DeviceTracker()
        _ = tracker.start(with: [device("a", origin: .snapshot), device("c", origin: .snapshot)])
        let moved = tracker.apply(device("b", .moved, old: "a"))
        #expect(moved?.kind == .moved)
        #expect(Set(tracker.known.keys) == ["/sys/devices/virtual/block/b", "/sys/devices/virtual/block/c"])
        // The listing already showed "c" under its new name.
        #expect(tracker.apply(device("c", .moved, old: "z")) == nil)
    }

    @Test func changesAreReportedButOnlyKnownDevicesAreRemembered() {
        var tracker = DeviceTracker()
        _ = tracker.start(with: [device("sda", origin: .snapshot)])
        #expect(tracker.apply(device("sda", .bound, driver: "sd"))?.kind == .bound)
        #expect(tracker.known["/sys/devices/virtual/block/sda"]?.driver == "sd")
        #expect(tracker.apply(device("sda", .unbound))?.kind == .unbound)
        #expect(tracker.known["/sys/devices/virtual/block/sda"]?.driver == nil)
        // A queued change of a device a rescan reported gone must not bring it back.
        #expect(tracker.apply(device("gone", .changed))?.kind == .changed)
        #expect(tracker.known["/sys/devices/virtual/block/gone"] == nil)
        #expect(tracker.apply(device("gone", .removed)) == nil)
    }

    @Test func aResyncReportsTheDifferenceRemovalsDeepestFirst() {
        var tracker = DeviceTracker()
        _ = tracker.start(with: [device("keep", origin: .snapshot), device("gone", origin: .snapshot),
                                 device("gone/part1", origin: .snapshot)])
        let (removed, added) = tracker.resync(with: [device("keep", origin: .rescan), device("new", origin: .rescan),
                                                     device("new/part1", origin: .rescan)])
        #expect(removed.map(\.sysname) == ["gone/part1", "gone"])
        #expect(added.map(\.sysname) == ["new", "new/part1"])
        #expect((removed + added).allSatisfy { $0.origin == .rescan })
        #expect(removed.allSatisfy { $0.kind == .removed })
        // A message queued before the listing changes nothing it already reported.
        #expect(tracker.apply(device("new")) == nil)
        #expect(tracker.apply(device("gone", .removed)) == nil)
    }

    @Test func aLateJoinerIsToldTheKnownDevicesAsASnapshot() {
        var tracker = DeviceTracker()
        _ = tracker.start(with: [device("b", origin: .snapshot)])
        _ = tracker.apply(device("a"))
        let current = tracker.current(as: .snapshot)
        #expect(current.map(\.sysname) == ["a", "b"])
        #expect(current.allSatisfy { $0.origin == .snapshot && $0.action == nil && $0.seqnum == nil })
    }
}
