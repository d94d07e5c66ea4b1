import EventBusKit
import Logging

/// The timers of `sources.timers`, kept running by the host.
///
/// Each is the bus's own shared timer source (``Bus/timer(_:)``), held by a host subscription:
/// a shared source runs while anyone subscribes, so the host's subscription makes the timer
/// tick for everyone — modules subscribed to `timer.tick` included — whether or not a module
/// asked for it. Ticks carry the source id `timer:<schedule>`; a module that subscribes to the
/// same schedule joins the same timer instead of starting a second one.
///
/// Used only on ``BusHost``'s control queue.
final class HostTimers {
    private var running: [String: (config: TimerConfig, subscription: AnyCancellable)] = [:]
    private let bus: Bus
    private let logger: Logger

    init(bus: Bus, logger: Logger) {
        self.bus = bus
        self.logger = logger
    }

    /// Starts, stops and restarts timers so the running set matches `timers`.
    func apply(_ timers: [TimerConfig]) {
        let wanted = Dictionary(uniqueKeysWithValues: timers.map { ($0.name, $0) })
        for (name, timer) in running where wanted[name] != timer.config {
            timer.subscription.cancel()
            running[name] = nil
            logger.info("timer \(name) stopped (\(timer.config.schedule))")
        }
        for timer in timers where running[timer.name] == nil {
            // The sink does nothing: the subscription exists to keep the shared source running.
            let subscription = bus.timer(timer.schedule).sink { _ in }
            running[timer.name] = (timer, subscription)
            logger.info("timer \(timer.name) started (\(timer.schedule))")
        }
    }

    func stopAll() {
        apply([])
    }
}
