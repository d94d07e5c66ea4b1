import Dispatch
@testable import EventBusKit
import Foundation
import Testing

/// The thread interval timers fire from: order, cancellation, and which scheduling policy the
/// code it runs sees.
@Suite struct TimerThreadTests {
    @Test func actionsRunInDeadlineOrderAndACancelledOneNever() async {
        let thread = TimerThread.shared
        let ran = Collected<[Int]>([])
        let now = MonotonicClock.now()
        let ms: UInt64 = 1_000_000
        _ = thread.schedule(at: now + 30 * ms) { ran.update { $0.append(30) } }
        _ = thread.schedule(at: now + 10 * ms) { ran.update { $0.append(10) } }
        let cancelled = thread.schedule(at: now + 15 * ms) { ran.update { $0.append(15) } }
        _ = thread.schedule(at: now + 20 * ms) { ran.update { $0.append(20) } }
        thread.cancel(cancelled)
        #expect(await eventually { ran.value.count >= 3 })
        // Past the last deadline: had the cancelled one run, it would be here.
        let settled = Collected(false)
        _ = thread.schedule(at: now + 40 * ms) { settled.update { $0 = true } }
        #expect(await eventually { settled.value })
        #expect(ran.value == [10, 20, 30])
    }

    @Test func timerActionsRunRealTimeWhenGrantedAndJobsNever() async {
        let thread = TimerThread.shared
        let policies = Collected<[String: Int32]>([:])
        thread.perform { policies.update { $0["job"] = sched_getscheduler(0) } }
        _ = thread.schedule(at: MonotonicClock.now()) { policies.update { $0["action"] = sched_getscheduler(0) } }
        #expect(await eventually { policies.value.count == 2 })
        #expect(policies.value["job"] == Int32(SCHED_OTHER))
        let expected = thread.realtimeWhileWaiting ? Int32(SCHED_FIFO) : Int32(SCHED_OTHER)
        #expect(policies.value["action"] == expected)
    }
}
