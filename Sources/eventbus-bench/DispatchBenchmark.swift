import EventBusKit
import Foundation
import Synchronization

// Dispatch benchmark: post → N subscribers, ns per delivery, the bus side by side with its
// anchors measured in the same run (DESIGN.md §2).

/// Best of 5 runs, in ns per delivery (one event reaching one subscriber).
func measure(subscribers n: Int, eventsPerRun: Int, _ body: (Int) -> Void) -> Double {
    let events = max(eventsPerRun / n, 10_000)
    body(events / 10)  // warm-up
    var best = Double.infinity
    for _ in 0..<5 {
        let start = MonotonicClock.now()
        body(events)
        let elapsed = Double(MonotonicClock.now() - start)
        best = min(best, elapsed / Double(events * n))
    }
    return best
}

final class Counter: @unchecked Sendable { var value = 0 }

func rawClosuresBehindLock(_ n: Int, eventsPerRun: Int) -> Double {
    let counter = Counter()
    let handlers = Mutex<[(Event) -> Void]>(Array(repeating: { (_: Event) in counter.value &+= 1 }, count: n))
    let event = Event(name: "bench.tick")
    return measure(subscribers: n, eventsPerRun: eventsPerRun) { count in
        for _ in 0..<count {
            let snapshot = handlers.withLock { $0 }
            for handler in snapshot { handler(event) }
        }
    }
}

func passthroughSubject(_ n: Int, eventsPerRun: Int) -> Double {
    let counter = Counter()
    let subject = PassthroughSubject<Event, Never>()
    let sinks = (0..<n).map { _ in subject.sink { _ in counter.value &+= 1 } }
    let event = Event(name: "bench.tick")
    let result = measure(subscribers: n, eventsPerRun: eventsPerRun) { count in
        for _ in 0..<count { subject.send(event) }
    }
    withExtendedLifetime(sinks) {}
    return result
}

func bus(_ n: Int, eventsPerRun: Int) -> Double {
    let counter = Counter()
    let bus = Bus()
    let sinks = (0..<n).map { _ in
        bus.publisher(for: try! EventPattern("bench.*")).sink { _ in counter.value &+= 1 }
    }
    // An unrelated subscriber, so routing has something to skip.
    let other = bus.publisher(for: try! EventPattern("fs.>")).sink { _ in }
    let event = Event(name: "bench.tick")
    let result = measure(subscribers: n, eventsPerRun: eventsPerRun) { count in
        for _ in 0..<count { bus.post(event) }
    }
    withExtendedLifetime((sinks, other)) {}
    precondition(counter.value > 0)
    return result
}

/// The bus feeding a general Combine subscriber (here `filter` then `Sink`): what a module
/// pipeline pays on top of the direct sink.
func busThroughOperator(_ n: Int, eventsPerRun: Int) -> Double {
    let counter = Counter()
    let bus = Bus()
    let sinks = (0..<n).map { _ in
        bus.publisher(for: try! EventPattern("bench.*")).filter { _ in true }.sink { _ in counter.value &+= 1 }
    }
    let event = Event(name: "bench.tick")
    let result = measure(subscribers: n, eventsPerRun: eventsPerRun) { count in
        for _ in 0..<count { bus.post(event) }
    }
    withExtendedLifetime(sinks) {}
    return result
}

func dispatchBenchmark(eventsPerRun: Int) {
    print("post → N sinks, ns per delivery (best of 5, \(eventsPerRun) deliveries per run)")
    print("N      raw+lock  PassthroughSubject  Bus→sink  Bus→filter→Sink  Bus/raw+lock  PassthroughSubject/Bus")
    for n in [1, 10, 100] {
        let raw = rawClosuresBehindLock(n, eventsPerRun: eventsPerRun)
        let subject = passthroughSubject(n, eventsPerRun: eventsPerRun)
        let ours = bus(n, eventsPerRun: eventsPerRun)
        let piped = busThroughOperator(n, eventsPerRun: eventsPerRun)
        print(String(format: "%-6d %8.1f  %18.1f  %8.1f  %15.1f  %11.2fx  %21.2fx",
                     n, raw, subject, ours, piped, ours / raw, subject / ours))
    }
    print("Targets at N=10: Bus/raw+lock ≤ 2x, PassthroughSubject/Bus ≥ 3x.")
}
