import Dispatch
import Foundation
@_spi(EventBusHost) import EventBusKit
import Logging

/// Says in the log when a module stalls — its mailbox full, its events dropped — once per
/// stall, with its name and how many it has dropped, and once when it takes events again
/// (its delivered count moves).
///
/// Why: a stalled module loses only its own events and announces the loss to itself (gap
/// notices), but an operator would only see it in `eventbus modules`. Watching the counters
/// once a second costs nothing on the hot path and tells the journal without repeating itself.
///
/// ## Threads
/// Runs on its own Dispatch timer queue; reads ``ModuleStatistics`` (safe from any thread).
final class ModuleStallWatch: @unchecked Sendable {
    // @unchecked: `stalled`/`lastDropped` are touched only on `queue`.

    private let queue = DispatchQueue(label: "eventbus.host.stall-watch")
    private let timer: DispatchSourceTimer
    private let logger: Logger
    private let statistics: @Sendable () -> [ModuleStatistics]
    /// Dropped count of each module at the last look.
    private var lastDropped: [String: UInt64] = [:]
    /// Stalled modules: their dropped and delivered counts when the stall was noticed.
    private var stalled: [String: (dropped: UInt64, delivered: UInt64)] = [:]

    init(logger: Logger, every interval: Duration = .seconds(1), statistics: @escaping @Sendable () -> [ModuleStatistics]) {
        self.logger = logger
        self.statistics = statistics
        timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + DispatchTimeInterval(interval), repeating: DispatchTimeInterval(interval))
        timer.setEventHandler { [weak self] in self?.look() }
        timer.resume()
    }

    // A host dropped without a shutdown must not leave the timer firing.
    deinit { timer.cancel() }

    func cancel() {
        timer.cancel()
    }

    private func look() {
        for module in statistics() {
            let before = lastDropped[module.name] ?? 0  // drops before the first look count too
            lastDropped[module.name] = module.dropped
            var log = logger
            log[metadataKey: "module"] = "\(module.name)"
            if let since = stalled[module.name] {
                // Over when it takes events again (not merely when nothing new was dropped).
                if module.delivered > since.delivered {
                    stalled[module.name] = nil
                    log.notice("module \(module.name) takes events again; \(module.dropped - since.dropped) event(s) were dropped while it was stalled")
                }
            } else if module.dropped > before {
                stalled[module.name] = (before, module.delivered)
                log.warning("module \(module.name) is stalled: its mailbox is full (\(module.queued) queued, \(String(format: "%.1f", Double(module.queuedBytes) / 1_048_576)) MiB) and its events are dropped (\(module.dropped) dropped so far)")
            }
        }
    }
}
