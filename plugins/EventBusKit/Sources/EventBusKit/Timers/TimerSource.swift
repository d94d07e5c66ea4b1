import Dispatch
import Foundation
import Synchronization

/// A timer as a shared bus source: posts `timer.tick` events on its schedule while anyone is
/// subscribed. All timers fire on one serial queue, so a timer never needs a thread of its own.
final class TimerSource: EventSource, @unchecked Sendable {
    static let sharedQueue = DispatchQueue(label: "eventbus.timers")

    let id: String
    private let schedule: TimerSchedule
    private let queue: DispatchQueue
    // Owned by `queue`.
    private var timer: DispatchSourceTimer?
    /// Strong while running (the bus hands each source a handle of its own); cleared on stop.
    private var bus: Bus?
    private var stopped = false

    init(id: String, schedule: TimerSchedule, queue: DispatchQueue = TimerSource.sharedQueue) {
        self.id = id
        self.schedule = schedule
        self.queue = queue
    }

    func start(posting bus: Bus) {
        queue.async { [self] in
            guard !stopped else { return }
            self.bus = bus
            let timer = DispatchSource.makeTimerSource(queue: queue)
            self.timer = timer
            let leeway = DispatchTimeInterval(schedule.tolerance)
            switch schedule.kind {
            case .interval(let interval):
                runInterval(timer, interval: interval, leeway: leeway)
            case .calendar(let calendar):
                runCalendar(timer, calendar: calendar, leeway: leeway)
            }
            timer.resume()
        }
    }

    func stop() {
        queue.async { [self] in
            stopped = true
            timer?.cancel()
            timer = nil
            bus = nil
        }
    }

    private func runInterval(_ timer: DispatchSourceTimer, interval: UInt64, leeway: DispatchTimeInterval) {
        var planner = MissedRunPlanner<UInt64>(policy: schedule.missedRuns) { $0 + interval }
        var armed = MonotonicClock.now() + interval
        func arm() {
            let delay = armed.subtractingReportingOverflow(MonotonicClock.now())
            let wait = delay.overflow ? 0 : delay.partialValue
            timer.schedule(deadline: .now() + .nanoseconds(Int(clamping: wait)), leeway: leeway)
        }
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            let now = MonotonicClock.now()
            let decision = planner.wake(armed: armed, now: now)
            if let slot = decision.firedSlot {
                let firedAt = Date()
                let lateness = Int64(now - slot)
                tick(scheduled: firedAt.addingTimeInterval(-Double(lateness) / 1e9), fired: firedAt,
                     lateness: lateness, missed: decision.missedRuns, monotonic: now)
            }
            armed = decision.nextSlot ?? armed + interval
            arm()
        }
        arm()
    }

    private func runCalendar(_ timer: DispatchSourceTimer, calendar: CalendarSchedule, leeway: DispatchTimeInterval) {
        var planner = MissedRunPlanner<Date>(policy: schedule.missedRuns) { calendar.nextFire(after: $0) }
        guard var armed = calendar.nextFire(after: Date()) else { return }
        func arm(_ date: Date) {
            let seconds = date.timeIntervalSince1970
            let spec = timespec(tv_sec: Int(seconds.rounded(.down)),
                                tv_nsec: Int((seconds - seconds.rounded(.down)) * 1e9))
            timer.schedule(wallDeadline: DispatchWallTime(timespec: spec), leeway: leeway)
        }
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            let now = Date()
            let decision = planner.wake(armed: armed, now: now)
            if let slot = decision.firedSlot {
                let lateness = Int64(now.timeIntervalSince(slot) * 1e9)
                tick(scheduled: slot, fired: now, lateness: lateness, missed: decision.missedRuns,
                     monotonic: MonotonicClock.now())
            }
            guard let next = decision.nextSlot else {
                timer.cancel()  // a fixed date that has passed: nothing more to fire
                return
            }
            armed = next
            arm(next)
        }
        arm(armed)
    }

    private func tick(scheduled: Date, fired: Date, lateness: Int64, missed: Int, monotonic: UInt64) {
        guard !stopped, let bus else { return }
        let tick = TimerTick(schedule: schedule.description, scheduled: scheduled, fired: fired,
                             latenessNanoseconds: lateness, missedRuns: missed)
        bus.post(Event(name: TimerTick.eventName, source: id, fields: tick.fields,
                       wallTime: fired, monotonicNanoseconds: monotonic))
    }
}

extension TimerSchedule: SourceOptions {
    /// Source ids read `timer:every 5s`, as before timers joined the registry.
    public static let kind = "timer"

    /// Makes the timer for a schedule; registered in every bus.
    static let driver: SourceDriver = { options, id in
        TimerSource(id: id, schedule: options as! TimerSchedule)
    }
}

extension Bus {
    /// `timer.tick` events on `schedule`. Subscriptions with the same schedule share one timer;
    /// it starts with the first and stops after the last cancels.
    public func timer(_ schedule: TimerSchedule) -> EventPublisher {
        // Through the source-kind registry like files and journal, so a module worker forwards
        // the schedule to the host, which runs the timer (the timer kind is always registered).
        try! publisher(for: [try! EventPattern(TimerTick.eventName)], from: schedule)
    }

    /// A timer every `interval`. Throws for an interval under 1 ms or a negative tolerance.
    public func timer(every interval: Duration, tolerance: Duration = .zero,
                      missedRuns: MissedRunPolicy = .fireOnce) throws -> EventPublisher {
        timer(try .every(interval, tolerance: tolerance, missedRuns: missedRuns))
    }

    /// A timer at calendar times such as `"Mon..Fri *-*-* 09:00"` (see ``CalendarSchedule``).
    public func timer(calendar spec: String, timeZone: TimeZone = .current, tolerance: Duration = .zero,
                      missedRuns: MissedRunPolicy = .fireOnce) throws -> EventPublisher {
        timer(try .calendar(spec, timeZone: timeZone, tolerance: tolerance, missedRuns: missedRuns))
    }
}
