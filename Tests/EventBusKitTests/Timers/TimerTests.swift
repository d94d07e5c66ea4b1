import Dispatch
@testable import EventBusKit
import Foundation
import Testing
import TestSupport

@Suite struct MissedRunPlannerTests {
    /// Interval slots every 10 units from 0.
    func planner(_ policy: MissedRunPolicy) -> MissedRunPlanner<UInt64> {
        MissedRunPlanner(policy: policy) { $0 + 10 }
    }

    @Test func onTimeOrSlightlyLateFiresForTheArmedSlot() {
        var p = planner(.fireOnce)
        #expect(p.wake(armed: 10, now: 10) == .init(firedSlot: 10, missedRuns: 0, nextSlot: 20))
        #expect(p.wake(armed: 20, now: 29) == .init(firedSlot: 20, missedRuns: 0, nextSlot: 30))
    }

    @Test func earlyWakeKeepsWaitingForTheSameSlot() {
        var p = planner(.fireOnce)
        #expect(p.wake(armed: 10, now: 7) == .init(firedSlot: nil, missedRuns: 0, nextSlot: 10))
    }

    @Test func fireOnceCollapsesMissedRunsIntoOneTickForTheLatestDueSlot() {
        var p = planner(.fireOnce)
        // Armed for 10, woke at 45 (a stall): 20, 30, 40 were due as well.
        #expect(p.wake(armed: 10, now: 45) == .init(firedSlot: 40, missedRuns: 3, nextSlot: 50))
        #expect(p.wake(armed: 50, now: 50) == .init(firedSlot: 50, missedRuns: 0, nextSlot: 60))
    }

    @Test func skipDropsDueRunsAndReportsThemOnTheNextTick() {
        var p = planner(.skip)
        #expect(p.wake(armed: 10, now: 45) == .init(firedSlot: nil, missedRuns: 0, nextSlot: 50))
        #expect(p.wake(armed: 50, now: 51) == .init(firedSlot: 50, missedRuns: 4, nextSlot: 60))
        #expect(p.wake(armed: 60, now: 60) == .init(firedSlot: 60, missedRuns: 0, nextSlot: 70))
    }

    @Test func calendarSlotsAcrossASuspendOfTwoDays() throws {
        let daily = try CalendarSchedule(parsing: "*-*-* 09:00:00 UTC")
        var p = MissedRunPlanner<Date>(policy: .fireOnce) { daily.nextFire(after: $0) }
        let armed = Date(timeIntervalSince1970: 1_700_038_800)  // 2023-11-15 09:00 UTC
        let resumed = armed.addingTimeInterval(2 * 86_400 + 3_600)  // 2023-11-17 10:00
        let decision = p.wake(armed: armed, now: resumed)
        #expect(decision.firedSlot == armed.addingTimeInterval(2 * 86_400))
        #expect(decision.missedRuns == 2)
        #expect(decision.nextSlot == armed.addingTimeInterval(3 * 86_400))
    }

    @Test func aScheduleWithNoMoreSlotsEnds() throws {
        let once = try CalendarSchedule(parsing: "2030-01-01 00:00:00 UTC")
        var p = MissedRunPlanner<Date>(policy: .fireOnce) { once.nextFire(after: $0) }
        let slot = try #require(once.nextFire(after: Date(timeIntervalSince1970: 0)))
        #expect(p.wake(armed: slot, now: slot) == .init(firedSlot: slot, missedRuns: 0, nextSlot: nil))
    }
}

@Suite struct TimerSourceTests {
    @Test func rejectsBadIntervals() {
        let bus = Bus()
        #expect(throws: EventBusError.self) { try bus.timer(every: .zero) }
        #expect(throws: EventBusError.self) { try bus.timer(every: .microseconds(10)) }
        #expect(throws: EventBusError.self) { try bus.timer(every: .seconds(1), tolerance: .seconds(-1)) }
        #expect(throws: EventBusError.self) { try bus.timer(calendar: "*-13-01") }
    }

    @Test func ticksCarryScheduledAndActualTimeInOrder() async throws {
        let bus = Bus()
        let ticks = Collected<[TimerTick]>([])
        let sink = try bus.timer(every: .milliseconds(10)).sink { event in
            if let tick = event.timerTick { ticks.update { $0.append(tick) } }
        }
        #expect(await eventually { ticks.value.count >= 3 })
        sink.cancel()
        let got = ticks.value
        #expect(got.allSatisfy { $0.schedule == "every 0.01 seconds" && $0.latenessNanoseconds >= 0 })
        #expect(got.allSatisfy { $0.fired >= $0.scheduled })
        for (a, b) in zip(got, got.dropFirst()) { #expect(b.scheduled > a.scheduled) }
    }

    @Test func subscribersOfOneScheduleShareOneTimerThatStopsWithTheLast() async throws {
        let bus = Bus()
        let a = RecordingSubscriber()
        let b = RecordingSubscriber()
        try bus.timer(every: .milliseconds(5)).subscribe(a)
        try bus.timer(every: .milliseconds(5)).subscribe(b)
        let other = try bus.timer(every: .milliseconds(7)).sink { _ in }
        #expect(bus.statistics.sources == ["timer:every 0.005 seconds": 2, "timer:every 0.007 seconds": 1])

        #expect(await eventually { a.events.count >= 3 && b.events.count >= 3 })
        // One timer: both see the same ticks, by bus sequence number, and only their own timer's.
        let common = Set(a.events.map(\.sequence)).intersection(b.events.map(\.sequence))
        #expect(common.count >= 2)
        #expect(a.events.allSatisfy { $0.source == "timer:every 0.005 seconds" })

        a.cancel()
        #expect(bus.statistics.sources["timer:every 0.005 seconds"] == 1)
        b.cancel()
        other.cancel()
        #expect(bus.statistics.sources.isEmpty)
        let countAfterStop = b.events.count
        try await Task.sleep(for: .milliseconds(30))
        #expect(b.events.count == countAfterStop)
    }

    @Test(arguments: MissedRunPolicy.allCases)
    func aStalledTimerShowsAsMissedRuns(policy: MissedRunPolicy) async throws {
        let bus = Bus()
        let schedule = try TimerSchedule.every(.milliseconds(10), missedRuns: policy)
        let source = SourceRequest(id: "timer:stall-test") { TimerSource(id: "timer:stall-test", schedule: schedule) }
        let ticks = Collected<[TimerTick]>([])
        let stalled = Collected(false)
        let sink = bus.publisher(for: [try EventPattern("timer.tick")], from: source).sink { event in
            if let tick = event.timerTick { ticks.update { $0.append(tick) } }
            // The tick's post made the timer thread the bus's delivery loop, so this sink runs on
            // it: sleeping here stalls the timer for ten periods.
            if !stalled.update({ let was = $0; $0 = true; return was }) { Thread.sleep(forTimeInterval: 0.1) }
        }
        #expect(await eventually { ticks.value.count >= 1 })
        #expect(await eventually { ticks.value.contains { $0.missedRuns >= 1 } })
        sink.cancel()
        if policy == .fireOnce {
            // The tick stands for the latest due run, so by construction it is less than one
            // period late: the missed runs are counted, not delivered late one by one.
            let missedTick = try #require(ticks.value.first { $0.missedRuns >= 1 })
            #expect(missedTick.latenessNanoseconds < 10_000_000)
        }
    }
}

@Suite struct NamedTimerTests {
    /// A named timer's ticks carry its name (`timer`), and the schedule without it; the same
    /// schedule named differently is another timer, unnamed ones share one as before.
    @Test func ticksCarryTheNameAndEachNameIsItsOwnTimer() async throws {
        let bus = Bus()
        let schedule = try TimerSchedule.every(.milliseconds(20))
        let ticks = Collected<[TimerTick]>([])
        let subscriptions = [
            bus.timer(schedule.named("heartbeat")).sink { event in ticks.update { $0.append(event.timerTick!) } },
            bus.timer(schedule.named("flush")).sink { event in ticks.update { $0.append(event.timerTick!) } },
            bus.timer(schedule).sink { event in ticks.update { $0.append(event.timerTick!) } },
            bus.timer(schedule).sink { _ in },
        ]
        defer { subscriptions.forEach { $0.cancel() } }
        #expect(Set(bus.statistics.sources.keys) == ["timer:\(schedule.named("heartbeat"))", "timer:\(schedule.named("flush"))", "timer:\(schedule)"],
                "\(bus.statistics.sources)")
        let deadline = Date().addingTimeInterval(30)
        while Set(ticks.value.map(\.name)) != ["heartbeat", "flush", nil], Date() < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        let seen = ticks.value
        #expect(Set(seen.map(\.name)) == ["heartbeat", "flush", nil])
        #expect(Set(seen.map(\.schedule)) == [schedule.description], "the schedule, without the name")
    }
}
