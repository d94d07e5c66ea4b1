import Dispatch
import EventBusHost
import EventBusKit
import EventBusMetrics
import Foundation

// The cost of metrics on delivery: N modules, each a real ModuleContext on its own mailbox with
// a `handle(in:)` handler, metrics off (no handler timing, no post counting) against metrics
// on (one handler call in 8 timed into its histogram, every post counted
// by source kind, and a scrape rendered while the events flow), in the same run.

/// Events per second from `post` on this thread to the last handler call on every module.
private func moduleDelivery(modules: Int, events: Int, metrics: Bool) -> Double {
    let bus = Bus()
    let registry = MetricsRegistry()
    let durations = HandlerDurations()
    let postCounts = PostCounts()
    if metrics { postCounts.start(on: bus) }
    let done = DispatchGroup()
    var contexts: [ModuleContext] = []
    for index in 0..<modules {
        let mailbox = Mailbox(label: "bench-\(index)", capacity: events)
        let context = ModuleContext(bus: bus.scoped(to: mailbox), config: ModuleConfig(), log: ModuleLog { _, _ in })
        if metrics { context.handlerDuration = durations.recorder(forModule: "bench-\(index)") }
        let counter = Counter()  // only touched on the mailbox's queue
        done.enter()
        try! context.bus.publisher(for: "bench.*").handle(in: context) { _ in
            counter.value += 1
            if counter.value == events { done.leave() }
        }
        contexts.append(context)
    }
    let event = Event(name: "bench.tick")
    let start = MonotonicClock.now()
    for index in 0..<events {
        bus.post(event)
        if metrics && index == events / 2 {
            _ = registry.render { scrape in
                for (kind, count) in postCounts.postedByKind {
                    scrape.counter("eventbus_events_posted_total", help: "", labels: [("source_kind", kind)], total: count)
                }
            }
            _ = durations.text(for: Set((0..<modules).map { "bench-\($0)" }))
        }
    }
    done.wait()
    let seconds = Double(MonotonicClock.now() - start) / 1e9
    postCounts.stop()
    withExtendedLifetime(contexts) {}
    return Double(events) / seconds
}

func metricsBenchmark(events: Int) {
    let modules = 10
    print("Metrics cost: \(modules) modules, each a handle(in:) handler on its own mailbox, events/s (best of 6 interleaved rounds, \(events) events per run)")
    var off = 0.0, on = 0.0
    for round in 0..<6 {
        // Alternating which goes first, so neither always runs on a warmer (or busier) machine.
        for metrics in round % 2 == 0 ? [false, true] : [true, false] {
            let rate = moduleDelivery(modules: modules, events: events, metrics: metrics)
            if metrics { on = max(on, rate) } else { off = max(off, rate) }
        }
    }
    print(String(format: "metrics off %10.0f events/s  (%.1f ns per delivery)", off, 1e9 / (off * Double(modules))))
    print(String(format: "metrics on  %10.0f events/s  (%.1f ns per delivery)", on, 1e9 / (on * Double(modules))))
    print(String(format: "on / off    %10.3f  (target ≥ 0.90)", on / off))
}
