import Glibc

extension System {
    /// `prctl(2)`, looked up at run time: `<sys/prctl.h>` is not part of Swift's Glibc module.
    private static let prctl: (@convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32)? = {
        guard let symbol = dlsym(nil, "prctl") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (Int32, UInt, UInt, UInt, UInt) -> Int32).self)
    }()

    private static func processControl(_ option: Int32, _ name: String, _ value: UInt) throws(CallError) {
        guard let prctl else { throw CallError(call: "prctl(\(name))", path: "libc", errno: ENOSYS) }
        _ = try call("prctl(\(name))") { prctl(option, value, 0, 0, 0) }
    }

    /// `PR_SET_PDEATHSIG`: the kernel sends `signal` to this process when the *thread* that
    /// started it ends (the module worker's tie to its host; see `WorkerProcess`).
    public static func setParentDeathSignal(_ signal: Int32) throws(CallError) {
        try processControl(1, "PR_SET_PDEATHSIG", UInt(signal))
    }

    /// `PR_SET_TIMERSLACK` for the calling thread: how late the kernel may end its sleeps and
    /// timeouts to batch wake-ups (50 µs by default).
    public static func setTimerSlack(nanoseconds: UInt) throws(CallError) {
        try processControl(29, "PR_SET_TIMERSLACK", nanoseconds)
    }

    /// Puts the calling thread in `SCHED_BATCH`: its wake-ups do not preempt the thread running
    /// on a busy CPU. Unprivileged; its nice level and fairness are unchanged.
    public static func setBatchScheduling() throws(CallError) {
        var parameters = sched_param(sched_priority: 0)
        let batch: Int32 = 3  // SCHED_BATCH, not part of Swift's Glibc module
        _ = try call("sched_setscheduler(SCHED_BATCH)") { sched_setscheduler(0, batch, &parameters) }
    }

    /// Puts the calling thread in `SCHED_FIFO` at priority 1, the lowest real-time one, or back
    /// in `SCHED_OTHER`. A real-time thread's wake-up preempts ordinary work at once, where a
    /// nice value does not while other processes keep every CPU busy. Needs root, `CAP_SYS_NICE`
    /// or `RLIMIT_RTPRIO` ≥ 1 (systemd's `LimitRTPRIO=1` with `RestrictRealtime=no`); the
    /// kernel's real-time throttling (95 % of each second by default) bounds a runaway thread.
    public static func setRealtimeScheduling(_ on: Bool) throws(CallError) {
        var parameters = sched_param(sched_priority: on ? 1 : 0)
        let policy = on ? Int32(SCHED_FIFO) : Int32(SCHED_OTHER)
        _ = try call(on ? "sched_setscheduler(SCHED_FIFO)" : "sched_setscheduler(SCHED_OTHER)") {
            sched_setscheduler(0, policy, &parameters)
        }
    }
}
