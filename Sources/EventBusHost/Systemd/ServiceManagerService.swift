import EventBusKit
import ServiceLifecycle

extension BusHost {
    /// One line on how the host is doing, for systemd's `STATUS=` (what `systemctl status`
    /// shows): modules active and refused, timers running, events posted. Any thread.
    ///
    /// Timers are counted from the bus's running shared sources, so a timer a module started
    /// counts too — it ticks just the same.
    public var statusLine: String {
        let modules = moduleStatistics
        let active = modules.filter { $0.state == .active }.count
        let refused = modules.filter { if case .failed = $0.state { return true } else { return false } }.count
        let bus = bus.statistics
        let timers = bus.sources.keys.filter { $0.hasPrefix("timer:") }.count
        return "\(active) module(s) active, \(refused) refused, \(timers) timer(s), \(bus.posted) event(s) posted"
    }
}

/// Keeps systemd informed while the host runs: `WATCHDOG=1` every ``ServiceNotifier/watchdogInterval``
/// and a fresh `STATUS=` line whenever it changed (checked every `statusInterval`).
///
/// ## Threads
/// Both loops are tasks on Swift's cooperative pool — the same threads that carry the host's
/// signal handling and lifecycle. That is the point of a watchdog here: if the pool is starved
/// or deadlocked, keep-alives stop and systemd restarts a host that could no longer react to
/// SIGTERM or SIGHUP. (The bus's delivery loop and the module queues are Dispatch threads
/// whose stalls the host already bounds and reports.)
///
/// Put it before ``HostService`` in the `ServiceGroup`: a group shuts its services down in
/// reverse order, so keep-alives continue while the host shuts down and stop only after it
/// has: a shutdown that drains mailboxes for longer than `WatchdogSec=` is not cut short by
/// a watchdog kill.
public struct ServiceManagerService: Service {
    private let notifier: ServiceNotifier
    private let host: BusHost
    private let statusInterval: Duration

    public init(notifier: ServiceNotifier, host: BusHost, statusInterval: Duration = .seconds(2)) {
        self.notifier = notifier
        self.host = host
        self.statusInterval = statusInterval
    }

    public func run() async throws {
        let notifier = notifier, host = host, statusInterval = statusInterval
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                if let interval = notifier.watchdogInterval {
                    group.addTask {
                        while !Task.isCancelled {
                            notifier.watchdogKeepAlive()
                            try? await Task.sleep(for: interval)
                        }
                    }
                }
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: statusInterval)
                        notifier.status(host.statusLine)
                    }
                }
            }
        }
    }
}
