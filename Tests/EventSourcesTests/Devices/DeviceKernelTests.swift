import EventBusKit
@testable import EventSources
import Foundation
import Synchronization
import Testing
import TestSupport
#if canImport(Glibc)
import Glibc
#endif

/// The devices source against the real kernel: loop devices made and removed through
/// `/dev/loop-control` in this process's network namespace, followed on the kernel layer (this
/// machine runs no udevd; the udev layer has tests of its own).
@Suite(.serialized) struct DeviceKernelTests {
    private let watch = DeviceWatch(subsystem: "block", layer: .kernel)

    private func bus(_ configuration: DeviceSources.Configuration = .init()) -> Bus {
        let bus = Bus()
        DeviceSources.register(on: bus, configuration: configuration)
        return bus
    }

    @Test func aLoopDeviceIsAddedAndRemovedExactlyOnceAndTheSnapshotListsWhatExisted() async throws {
        let before = try LoopControl.make()
        defer { try? LoopControl.remove(before) }
        let bus = bus()
        let recorder = DeviceRecorder()
        recorder.cancellable = try bus.devices(watch).sink { recorder.record($0) }
        defer { recorder.cancellable?.cancel() }
        #expect(await recorder.waitForSnapshot())
        let status = try #require(recorder.notices.first)
        #expect(status.kind == .status && status.layer == .kernel)
        let snapshot = recorder.changes.filter { $0.origin == .snapshot }
        #expect(snapshot.contains { $0.syspath == LoopControl.syspath(before) && $0.kind == .added && $0.devnode == "/dev/loop\(before)" })
        #expect(snapshot.allSatisfy { $0.subsystem == "block" && $0.layer == .kernel })
        #expect(recorder.notices.first { $0.kind == .snapshot }?.devices == snapshot.count)

        let number = try LoopControl.make()
        try LoopControl.remove(number)
        try LoopControl.remove(before)
        // A sentinel after them: events come in order, so once its removal is here any repeat
        // of the others would be too.
        let sentinel = try LoopControl.make()
        try LoopControl.remove(sentinel)
        #expect(await eventually { !recorder.changes(.removed, of: LoopControl.syspath(sentinel)).isEmpty })

        let added = recorder.changes(.added, of: LoopControl.syspath(number))
        #expect(added.count == 1)
        #expect(recorder.changes(.removed, of: LoopControl.syspath(number)).count == 1)
        #expect(recorder.changes(.removed, of: LoopControl.syspath(before)).count == 1)
        #expect(recorder.changes(.added, of: LoopControl.syspath(before)).count == 1)  // the snapshot's
        let live = try #require(added.first)
        #expect(live.origin == .event && live.action == "add" && live.seqnum != nil)
        #expect(live.devnode == "/dev/loop\(number)" && live.sysname == "loop\(number)")
        #expect(live.properties["MAJOR"] == "7" && live.properties["DEVNAME"] == "/dev/loop\(number)")
        #expect(recorder.count(.gap) == 0)
    }

    @Test func subscribersShareOneMonitorAndALateOneGetsTheSnapshot() async throws {
        let existing = try LoopControl.make()
        defer { try? LoopControl.remove(existing) }
        let bus = bus()
        let first = DeviceRecorder()
        first.cancellable = try bus.devices(watch).sink { first.record($0) }
        #expect(await first.waitForSnapshot())
        let live = try LoopControl.make()
        defer { try? LoopControl.remove(live) }
        #expect(await eventually { !first.changes(.added, of: LoopControl.syspath(live)).isEmpty })

        let second = DeviceRecorder()
        second.cancellable = try bus.devices(watch).sink { second.record($0) }
        #expect(bus.statistics.sources == ["devices:\(watch)": 2])
        #expect(await second.waitForSnapshot())
        // What the first learned live, the second learns from its snapshot.
        for number in [existing, live] {
            #expect(second.changes(.added, of: LoopControl.syspath(number)).map(\.origin) == [.snapshot])
        }
        // The second's snapshot went to it alone.
        #expect(first.count(.snapshot) == 1)
        #expect(second.notices.first?.kind == .status)

        try LoopControl.remove(live)
        #expect(await eventually { second.changes(.removed, of: LoopControl.syspath(live)).count == 1 })
        #expect(first.changes(.removed, of: LoopControl.syspath(live)).count == 1)
        first.cancellable?.cancel()
        second.cancellable?.cancel()
        #expect(await eventually { bus.statistics.sources.isEmpty })
    }

    /// The subscriber holds the monitor thread (the source posts on it) while devices come and
    /// go, so the socket's small receive buffer overflows: a `devices.gap`, then a rescan that
    /// reports what changed meanwhile — each device still added and removed exactly once.
    @Test func messagesTheKernelDroppedAreAnnouncedAndTheRescanReportsTheDifference() async throws {
        let goneWhileBlind = try LoopControl.make()
        defer { try? LoopControl.remove(goneWhileBlind) }
        let bus = bus(.init(receiveBufferSize: 1))  // the kernel's minimum: a few messages
        let recorder = DeviceRecorder()
        let holding = DispatchSemaphore(value: 0)
        let release = DispatchSemaphore(value: 0)
        let trigger = Mutex<String?>(nil)
        recorder.cancellable = try bus.devices(watch).sink { event in
            recorder.record(event)
            if let device = event.device, device.kind == .added, device.syspath == trigger.withLock({ $0 }) {
                holding.signal()
                release.wait()
            }
        }
        defer { recorder.cancellable?.cancel() }
        #expect(await recorder.waitForSnapshot())
        #expect(recorder.changes(.added, of: LoopControl.syspath(goneWhileBlind)).count == 1)

        // The trigger is set before the kernel can announce the device.
        let blocker = try LoopControl.make { number in trigger.withLock { $0 = LoopControl.syspath(number) } }
        #expect(holding.wait(timeout: patienceDeadline()) == .success)
        var madeWhileBlind: [Int] = []
        for _ in 0..<40 { madeWhileBlind.append(try LoopControl.make()) }
        try LoopControl.remove(goneWhileBlind)
        release.signal()

        #expect(await eventually { recorder.count(.rescanned) >= 1 })
        let gap = try #require(recorder.notices.first { $0.kind == .gap })
        #expect((gap.dropped ?? 0) > 0)
        for number in madeWhileBlind {
            #expect(recorder.changes(.added, of: LoopControl.syspath(number)).count == 1, "loop\(number)")
        }
        #expect(recorder.changes(.removed, of: LoopControl.syspath(goneWhileBlind)).count == 1)
        #expect(recorder.changes.contains { $0.origin == .rescan })

        // Afterwards, live again: each removal once.
        for number in madeWhileBlind + [blocker] { try LoopControl.remove(number) }
        let sentinel = try LoopControl.make()
        try LoopControl.remove(sentinel)
        #expect(await eventually {
            !recorder.changes(.removed, of: LoopControl.syspath(sentinel)).isEmpty || recorder.count(.rescanned) > 1
        })
        // A second overflow (the tiny buffer on a busy machine) rescans too; either way each
        // device ends up removed exactly once.
        #expect(await eventually { (madeWhileBlind + [blocker]).allSatisfy { !recorder.changes(.removed, of: LoopControl.syspath($0)).isEmpty } })
        for number in madeWhileBlind + [blocker] {
            #expect(recorder.changes(.removed, of: LoopControl.syspath(number)).count == 1, "loop\(number)")
            #expect(recorder.changes(.added, of: LoopControl.syspath(number)).count == 1, "loop\(number)")
        }
    }

    @Test func aMonitorStopsWithItsLastSubscriberAndCanStartAgain() async throws {
        let bus = bus()
        for _ in 0..<3 {
            let recorder = DeviceRecorder()
            recorder.cancellable = try bus.devices(watch).sink { recorder.record($0) }
            #expect(await recorder.waitForSnapshot())
            recorder.cancellable?.cancel()
            #expect(bus.statistics.sources.isEmpty)
        }
    }
}
