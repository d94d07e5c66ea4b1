import EventBusKit
import EventSources
import Foundation
import SystemCalls
import Testing
import TestSupport

/// Which scheduling policy the units connection's thread has: real-time while it waits for
/// systemd's signals (where the kernel grants it), ordinary for what is not urgent. A manager
/// that is not there is enough: the thread starts, and a joiner hears the gap from the
/// connecting step. Transitions posted real-time need a real systemd: ProductionTests' Units.
struct UnitsThreadPriorityTests {
    @Test func theThreadWaitsRealTimeAndTellsAJoinerOfTheGapAsAnOrdinaryThread() async throws {
        let bus = Bus()
        UnitsDriver.register(on: bus)
        let policies = Collected<[Int32]>([])
        let watch = UnitWatch(match: .names("*"), manager: .address("unix:path=/nonexistent/\(UUID().uuidString)"))
        let subscription = try bus.units(watch).sink { event in
            if event.unitsGap != nil { policies.update { $0.append(sched_getscheduler(0)) } }
        }
        defer { subscription.cancel() }
        #expect(await eventually { !policies.value.isEmpty })
        #expect(policies.value.first == Int32(SCHED_OTHER), "the gap was posted real-time")

        let expected = Self.realtimeIsGranted() ? Int32(SCHED_FIFO) : Int32(SCHED_OTHER)
        // Between connection attempts (backing off up to 5 s) the thread waits in poll(2).
        #expect(await eventually {
            let threads = Self.threads(named: "eventbus.units")
            return !threads.isEmpty && threads.allSatisfy { sched_getscheduler($0) == expected }
        }, "eventbus.units threads and their policies: \(Self.threads(named: "eventbus.units").map { ($0, sched_getscheduler($0)) }), expected \(expected)")
    }

    /// Whether this process may make a thread real-time: asked on a thread of its own.
    private static func realtimeIsGranted() -> Bool {
        let granted = Collected(false)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            granted.update { $0 = (try? System.setRealtimeScheduling(true)) != nil }
            done.signal()
        }
        done.wait()
        return granted.value
    }

    /// This process's threads whose name is `name`, by thread id.
    private static func threads(named name: String) -> [pid_t] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.compactMap { task in
            let comm = try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8)
            return comm?.trimmingCharacters(in: .newlines) == name ? pid_t(task) : nil
        }
    }
}
