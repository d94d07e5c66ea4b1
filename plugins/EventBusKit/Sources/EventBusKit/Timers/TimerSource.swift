import Dispatch
import Foundation
import Synchronization

/// A timer as a shared bus source: posts `timer.tick` events on its schedule while anyone is
/// subscribed.
///
/// Threads: interval timers wait and fire on the one ``TimerThread`` (raised priority, one
/// wake-up per tick: a 10 ms timer stays punctual with every core busy); calendar timers — wall
/// clock, whole seconds, where a few ms do not matter and clock changes must move them — on one
/// serial dispatch queue shared by all. Either way a timer needs no thread of its own, and each
/// source's state is only touched from its own context (the thread or the queue), so it needs
/// no lock.
final class TimerSource: EventSource, @unchecked Sendable {
    static let sharedQueue = DispatchQueue(label: "eventbus.timers")

    let id: String
    private let schedule: TimerSchedule
    private let queue: DispatchQueue
    // Owned by `queue` (calendar) or the timer thread (interval).
    private var timer: DispatchSourceTimer?
    private var armedToken: UInt64?
    /// Strong while running (the bus hands each source a handle of its own); cleared on stop.
    private var bus: Bus?
    private var stopped = false

    init(id: String, schedule: TimerSchedule, queue: DispatchQueue = TimerSource.sharedQueue) {
        self.id = id
        self.schedule = schedule
        self.queue = queue
    }

    func start(posting bus: Bus) {
        switch schedule.kind {
        case .interval(let interval):
            TimerThread.shared.perform { [self] in
                guard !stopped else { return }
                self.bus = bus
                runInterval(interval: interval)
            }
        case .calendar(let calendar):
            queue.async { [self] in
                guard !stopped else { return }
                self.bus = bus
                let timer = DispatchSource.makeTimerSource(queue: queue)
                self.timer = timer
                runCalendar(timer, calendar: calendar, leeway: DispatchTimeInterval(schedule.tolerance))
                timer.resume()
            }
        }
    }

    func stop() {
        switch schedule.kind {
        case .interval:
            TimerThread.shared.perform { [self] in
                stopped = true
                if let armedToken { TimerThread.shared.cancel(armedToken) }
                armedToken = nil
                bus = nil
            }
        case .calendar:
            queue.async { [self] in
                stopped = true
                timer?.cancel()
                timer = nil
                bus = nil
            }
        }
    }

    /// On the timer thread. The tolerance is not used: the thread fires each tick on time, which
    /// any tolerance allows.
    private func runInterval(interval: UInt64) {
        var planner = MissedRunPlanner<UInt64>(policy: schedule.missedRuns) { $0 + interval }
        var armed = MonotonicClock.now() + interval
        func fire() {
            guard !stopped else { return }
            let now = MonotonicClock.now()
            let decision = planner.wake(armed: armed, now: now)
            if let slot = decision.firedSlot {
                let firedAt = Date()
                let lateness = Int64(now - slot)
                tick(scheduled: firedAt.addingTimeInterval(-Double(lateness) / 1e9), fired: firedAt,
                     lateness: lateness, missed: decision.missedRuns, monotonic: now)
            }
            guard !stopped else { return }  // a subscriber on the bus loop may have stopped it
            armed = decision.nextSlot ?? armed + interval
            armedToken = TimerThread.shared.schedule(at: armed) { fire() }
        }
        armedToken = TimerThread.shared.schedule(at: armed) { fire() }
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
        let tick = TimerTick(schedule: schedule.unnamed.description, name: schedule.name, scheduled: scheduled, fired: fired,
                             latenessNanoseconds: lateness, missedRuns: missed)
        bus.post(Event(name: TimerTick.eventName, source: id, fields: tick.fields,
                       wallTime: fired, monotonicNanoseconds: monotonic))
    }
}

extension TimerSchedule: SourceOptions {
    /// Source ids read `timer:every 5s`: the kind, then the schedule as the config writes it.
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
