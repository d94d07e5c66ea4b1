import Dispatch
import EventBusKit
import Foundation

// Cross-thread delivery: events posted on one thread, handled on each module's own queue —
// through the bus's mailboxes, side by side with OpenCombine's `receive(on:)` onto a
// DispatchQueue (one `async` per event), in the same run.

/// Events per second from `post` on this thread to the last handler call on `modules` mailboxes
/// (every event reaches every module), posted one by one or in batches of `batch` through
/// `post(contentsOf:)`. Best of 3. Returns the rate and the events dropped (0: each mailbox
/// holds the whole run).
func mailboxDelivery(modules: Int, events: Int, batch: Int = 1) -> (rate: Double, dropped: UInt64) {
    var best = 0.0
    var dropped: UInt64 = 0
    for _ in 0..<3 {
        let bus = Bus()
        let done = DispatchGroup()
        var cancellables: [AnyCancellable] = []
        var mailboxes: [Mailbox] = []
        for index in 0..<modules {
            let mailbox = Mailbox(label: "bench-\(index)", capacity: events)
            mailboxes.append(mailbox)
            let counter = Counter()  // only touched on the mailbox's queue
            done.enter()
            cancellables.append(bus.scoped(to: mailbox).publisher(for: try! EventPattern("bench.*")).sink { _ in
                counter.value += 1
                if counter.value == events { done.leave() }
            })
        }
        let event = Event(name: "bench.tick")
        let run = [Event](repeating: event, count: batch)
        let start = MonotonicClock.now()
        if batch <= 1 {
            for _ in 0..<events { bus.post(event) }
        } else {
            var left = events
            while left > 0 {
                bus.post(contentsOf: run.prefix(left))
                left -= min(left, batch)
            }
        }
        done.wait()
        let seconds = Double(MonotonicClock.now() - start) / 1e9
        best = max(best, Double(events) / seconds)
        dropped += mailboxes.reduce(0) { $0 + $1.statistics.dropped }
        withExtendedLifetime(cancellables) {}
    }
    return (best, dropped)
}

/// The same through OpenCombine: a `PassthroughSubject` with one `receive(on:)` + `sink` per
/// module, each onto its own serial DispatchQueue. Best of 3, events per second.
func receiveOnDelivery(modules: Int, events: Int) -> Double {
    var best = 0.0
    for _ in 0..<3 {
        let subject = PassthroughSubject<Event, Never>()
        let done = DispatchGroup()
        var cancellables: [AnyCancellable] = []
        for index in 0..<modules {
            let queue = DispatchQueue(label: "bench-receive-on-\(index)")
            let counter = Counter()
            done.enter()
            cancellables.append(subject.receive(on: queue.ocombine).sink { _ in
                counter.value += 1
                if counter.value == events { done.leave() }
            })
        }
        let event = Event(name: "bench.tick")
        let start = MonotonicClock.now()
        for _ in 0..<events { subject.send(event) }
        done.wait()
        let seconds = Double(MonotonicClock.now() - start) / 1e9
        best = max(best, Double(events) / seconds)
        withExtendedLifetime(cancellables) {}
    }
    return best
}

func mailboxBenchmark(events: Int) {
    print("Cross-thread delivery into module queues, events/s (best of 3, \(events) events per run)")
    print("modules  Bus→Mailbox→sink  OpenCombine receive(on:)→sink  ratio   dropped")
    for modules in [1, 4] {
        // Interleaved rounds (each best of 3 runs), best of each: load from other processes
        // then hits both columns alike.
        var ours = 0.0, theirs = 0.0
        var dropped: UInt64 = 0
        for _ in 0..<2 {
            let (rate, lost) = mailboxDelivery(modules: modules, events: events)
            ours = max(ours, rate)
            dropped += lost
            theirs = max(theirs, receiveOnDelivery(modules: modules, events: events))
        }
        print(String(format: "%-7d  %16.0f  %29.0f  %5.2fx  %7d", modules, ours, theirs, ours / theirs, dropped))
    }
    for modules in [1, 4] {
        var rate = 0.0
        var dropped: UInt64 = 0
        for _ in 0..<2 {
            let (best, lost) = mailboxDelivery(modules: modules, events: events, batch: 512)
            rate = max(rate, best)
            dropped += lost
        }
        print(String(format: "%-7d  %16.0f  (post(contentsOf:) in batches of 512)     %7d", modules, rate, dropped))
    }
    print("Target: ≥ 3x OpenCombine's receive(on:).")
}
