import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// The thread that waits on one inotify descriptor and has its events handled as they come.
///
/// Why a thread of its own rather than a `DispatchSourceRead`: a read source hands every wake-up
/// from libdispatch's epoll thread to a worker thread. During a storm on two cores, the writer and
/// the worker keep both busy and that hand-off waited for a time slice: write → subscriber p99 was
/// 20–65 ms (measured). Here the thread that `poll`s also handles what it read, by running the
/// handler as a `queue.sync` block — which libdispatch runs on the calling thread when the queue is
/// free — so the queue stays the one owner of the monitor's state and no wake-up changes threads.
///
/// After handling what it read, the thread pauses for ``coalescing`` before it reads
/// again, so that during a storm it takes the kernel's queue in batches. Why: a reader that drains
/// every event as it comes sleeps between events, and then every file operation of the writer
/// also wakes it, and the queue's cache lines move between the two CPUs for each event — the
/// writer slows down. Measured on the 100k-file storm (2 cores): 226–229k events/s without the
/// pause, 273–278k with 20–50 µs (`inotifywait`, same runs: 240–273k). A lone event is still
/// read at once (the pause comes after a read); what follows it within the pause waits at most
/// that long — which is most of a quiet storm's median latency: 20 µs (a sleep of ~35 µs on this
/// VM) puts it at 0.96–1.18× inotifywait's where 30 µs gave 1.24–1.41×, for a little more CPU
/// per event idle (1.03–1.07× inotifywait's, against 0.84–1.12×) and none measurable under a CPU
/// hog, where reads are long (docs/benchmarks.md). The thread asks for a timer slack of 1 ns: with the default 50 µs the kernel may
/// end a 30 µs sleep 80 µs after it began, and the events that came meanwhile wait as long.
///
/// The thread owns the inotify descriptor and a wake-up for `stop`; it closes the descriptor
/// when it ends, so `stop` never waits for it (and cannot deadlock with a handler waiting for the
/// queue).
final class InotifyReader: @unchecked Sendable {
    let descriptor: Int32
    /// Polled with the descriptor, signalled by `stop`.
    private let wake: System.WakeUp
    private let stopped = Atomic<Bool>(false)
    static let coalescing = Duration.microseconds(20)
    private let pause = NSCondition()
    private var paused = false  // guarded by `pause`

    /// Takes ownership of `descriptor`; throws (descriptor closed) if no wake-up could be made.
    init(descriptor: Int32) throws(System.CallError) {
        do { wake = try System.WakeUp() } catch {
            System.close(descriptor)
            throw error
        }
        self.descriptor = descriptor
    }

    /// What one run of the handler did.
    struct Outcome {
        /// Whether it read events: then the thread pauses and runs the handler again without a
        /// `poll` first (in a storm, what came during the pause is there to read).
        var readEvents: Bool
        /// How long the thread may wait for the descriptor (ms; -1: as long as it takes) before it
        /// runs the handler again anyway (so that the monitor can note when its last events'
        /// changes settle).
        var timeout: Int32

        static let idle = Outcome(readEvents: false, timeout: -1)
    }

    /// Starts the thread; `handle` runs each time the descriptor may be readable, unless paused.
    func start(paused: Bool, handle: @escaping @Sendable (InotifyReader) -> Outcome) {
        self.paused = paused
        let thread = Thread { [self] in
            System.nameCurrentThread("eventbus.files")
            run(handle)
        }
        thread.start()
    }

    /// Ends the thread soon; it closes the descriptors on its way out.
    func stop() {
        stopped.store(true, ordering: .releasing)
        pause.lock()
        pause.broadcast()
        pause.unlock()
        wake.signal()
    }

    /// Whether reading is paused (a test hook); read by the handler before it reads.
    var isPaused: Bool {
        pause.lock()
        defer { pause.unlock() }
        return paused
    }

    func setPaused(_ value: Bool) {
        pause.lock()
        paused = value
        pause.broadcast()
        pause.unlock()
    }

    private func run(_ handle: (InotifyReader) -> Outcome) {
        Self.setTimerSlack(nanoseconds: 1)
        Self.disfavorOnWakeUp()
        var fds = [pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0),
                   pollfd(fd: wake.descriptor, events: Int16(POLLIN), revents: 0)]
        var outcome = Outcome.idle
        while !stopped.load(ordering: .acquiring) {
            pause.lock()
            while paused && !stopped.load(ordering: .acquiring) { pause.wait() }
            pause.unlock()
            if outcome.readEvents {
                // During a storm a cycle is this read and the pause: no `poll` (a read that
                // finds nothing sends the thread back to it).
                System.sleep(for: Self.coalescing)
                if stopped.load(ordering: .acquiring) { break }
                outcome = handle(self)
                continue
            }
            fds[0].revents = 0
            fds[1].revents = 0
            guard let ready = try? System.poll(&fds, timeout: outcome.timeout) else { break }
            if stopped.load(ordering: .acquiring) { break }
            if fds[0].revents & Int16(POLLNVAL) != 0 { break }
            if fds[0].revents != 0 || ready == 0 { outcome = handle(self) }
        }
        System.close(descriptor)
    }

    /// Puts the calling thread in `SCHED_BATCH`: its wake-ups no longer preempt the thread that
    /// holds a busy CPU; it runs when a CPU is idle (at once on a machine with one to spare) or
    /// when the running thread's slice ends. Why: on a machine whose CPUs are all taken, a reader
    /// that preempts on every wake-up takes the kernel's queue a couple of events at a time and
    /// pays a sleep, a wake-up and a switch for each few — `inotifywait` is not woken ahead of
    /// others either, and reads hundreds at a time there. Measured (`files-reader`, 100k files,
    /// load ~6 from other processes): 2 800 → 360 pauses, 13 600 → 1 100 reads and 3 200 → 1 000
    /// context switches for 200 000 events. Unprivileged; nice level and fairness are unchanged.
    /// Without it the thread keeps `SCHED_OTHER`: costlier under load, not wrong.
    private static func disfavorOnWakeUp() {
        try? System.setBatchScheduling()
    }

    /// Without a timer slack of its own the thread keeps the default: slower, not wrong.
    private static func setTimerSlack(nanoseconds: UInt) {
        try? System.setTimerSlack(nanoseconds: nanoseconds)
    }
}
