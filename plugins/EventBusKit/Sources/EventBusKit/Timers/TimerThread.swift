#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif
import Foundation

/// The one thread interval timers wait on and fire from, at a raised scheduling priority.
///
/// Why not a `DispatchSourceTimer`: on Linux a dispatch timer wakes dispatch's manager thread,
/// which then wakes a pool worker for the handler — two wake-ups at normal priority. With every
/// core busy (a CPU hog, a build), each waits for a time slice, and a 10 ms timer's p99 lateness
/// measured 9–17 ms (`eventbus-bench timer-jitter`). Here one thread sleeps in
/// `pthread_cond_timedwait` on `CLOCK_MONOTONIC` and runs the due timer itself.
///
/// Priority: the thread is `SCHED_FIFO` at priority 1 (the lowest real-time one; allowed to
/// root or with `CAP_SYS_NICE`) while it waits and while it fires a timer, so its wake-up
/// preempts ordinary work at once — a nice value alone does not when other processes keep the
/// CPUs busy: measured, a tick dropped to `SCHED_OTHER` before posting was preempted on the
/// spot and ran milliseconds late. Firing posts the tick, and when the bus's delivery loop is
/// idle this thread becomes the loop for that post: the loop's subscribers (mailbox hand-offs,
/// the control socket's feed, closure sinks — short by design; module code runs on mailbox
/// queues at normal priority) then run real-time for that delivery. The kernel's real-time
/// throttling (95 % of each second by default) bounds a runaway one. Jobs (`perform`: sources
/// starting and stopping) run as `SCHED_OTHER` at nice −10. Without the privilege the thread
/// keeps whatever it is granted (nice −10, or the process's priority) and works the same, only
/// less punctually under load.
///
/// Threads: `perform`, `schedule` and `cancel` may be called from any thread; jobs and timer
/// actions run on this thread, one at a time, in deadline order (jobs first).
final class TimerThread: @unchecked Sendable {
    static let shared = TimerThread()

    /// Whether the kernel granted the thread its nice −10, and `SCHED_FIFO` while it waits.
    private(set) var niceRaised = false
    private(set) var realtimeWhileWaiting = false

    private struct Entry {
        var deadline: UInt64
        var action: () -> Void
    }

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    // Guarded by `mutex`.
    private var entries: [UInt64: Entry] = [:]
    private var jobs: [() -> Void] = []
    private var lastToken: UInt64 = 0

    private init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
        let thread = Thread { [unowned self] in self.run() }
        thread.name = "eventbus.timers"
        thread.stackSize = 256 << 10
        thread.start()
    }

    /// Runs `job` on the timer thread, before any timer that is due.
    func perform(_ job: @escaping () -> Void) {
        pthread_mutex_lock(mutex)
        jobs.append(job)
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
    }

    /// Runs `action` on the timer thread once `CLOCK_MONOTONIC` reaches `deadline` (ns). Returns
    /// a token for `cancel`.
    func schedule(at deadline: UInt64, _ action: @escaping () -> Void) -> UInt64 {
        pthread_mutex_lock(mutex)
        lastToken += 1
        let token = lastToken
        entries[token] = Entry(deadline: deadline, action: action)
        pthread_cond_signal(condition)
        pthread_mutex_unlock(mutex)
        return token
    }

    /// Forgets a scheduled action; it does not run unless it is already running.
    func cancel(_ token: UInt64) {
        pthread_mutex_lock(mutex)
        entries[token] = nil
        pthread_mutex_unlock(mutex)
    }

    /// Real-time while waiting, ordinary while running others' code (see the type's comment).
    private func setRealtime(_ on: Bool) {
        var parameters = sched_param()
        parameters.sched_priority = on ? 1 : 0
        let result = pthread_setschedparam(pthread_self(), on ? Int32(SCHED_FIFO) : Int32(SCHED_OTHER), &parameters)
        if on, !realtimeWhileWaiting { realtimeWhileWaiting = result == 0 }
    }

    private func run() {
        // On Linux the nice value is per thread, and `who` 0 is the calling thread.
        niceRaised = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, -10) == 0
        setRealtime(true)
        pthread_mutex_lock(mutex)
        while true {
            if !jobs.isEmpty {
                let due = jobs
                jobs.removeAll()
                pthread_mutex_unlock(mutex)
                if realtimeWhileWaiting { setRealtime(false) }
                due.forEach { $0() }
                if realtimeWhileWaiting { setRealtime(true) }
                pthread_mutex_lock(mutex)
                continue
            }
            guard let (token, next) = entries.min(by: { $0.value.deadline < $1.value.deadline }) else {
                pthread_cond_wait(condition, mutex)
                continue
            }
            let now = MonotonicClock.now()
            if next.deadline <= now {
                entries[token] = nil
                pthread_mutex_unlock(mutex)
                next.action()
                pthread_mutex_lock(mutex)
                continue
            }
            var until = timespec(tv_sec: Int(next.deadline / 1_000_000_000),
                                 tv_nsec: Int(next.deadline % 1_000_000_000))
            _ = pthread_cond_timedwait(condition, mutex, &until)
        }
    }
}
