/// When a crashed worker is started again — the `Restart=on-failure` of systemd, with its start
/// limit: at most ``WorkerSettings/startLimitBurst`` restarts within
/// ``WorkerSettings/startLimitInterval``; the delay before each doubles from
/// ``WorkerSettings/restartDelay`` with every recent crash, so a module that crashes at once is
/// not restarted in a tight loop. Pure: time comes in as an argument, so tests need no clock.
public struct RestartPolicy: Sendable {
    public enum Decision: Sendable, Equatable {
        case restart(after: Duration)
        /// The start limit is reached: the module stays down (until a reload).
        case giveUp(restarts: Int, within: Duration)
    }

    public let settings: WorkerSettings
    /// When the restarts within the interval happened.
    private var recent: [ContinuousClock.Instant] = []

    public init(settings: WorkerSettings) {
        self.settings = settings
    }

    /// A worker crashed at `now`: restart, after how long, or give up.
    public mutating func afterCrash(at now: ContinuousClock.Instant) -> Decision {
        recent.removeAll { now - $0 > settings.startLimitInterval }
        guard recent.count < settings.startLimitBurst else {
            return .giveUp(restarts: recent.count, within: settings.startLimitInterval)
        }
        recent.append(now)
        var delay = settings.restartDelay
        for _ in 1..<recent.count where delay < WorkerSettings.maximumRestartDelay { delay = delay * 2 }
        return .restart(after: min(delay, WorkerSettings.maximumRestartDelay))
    }
}
