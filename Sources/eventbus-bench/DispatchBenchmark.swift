import EventBusKit
import Foundation
import Synchronization

// Dispatch benchmark: post → N subscribers, ns per delivery, the bus side by side with its
// anchors measured in the same run (docs/platform-facts.md, Delivery costs).

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

/// The bus with one sink, the events posted in batches of `batch` through `post(contentsOf:)`
/// (as the journal source posts): ns per event.
func busBatch(_ batch: Int, eventsPerRun: Int) -> Double {
    let counter = Counter()
    let bus = Bus()
    let sink = bus.publisher(for: try! EventPattern("bench.*")).sink { _ in counter.value &+= 1 }
    let other = bus.publisher(for: try! EventPattern("fs.>")).sink { _ in }
    let run = [Event](repeating: Event(name: "bench.tick"), count: batch)
    let result = measure(subscribers: 1, eventsPerRun: eventsPerRun) { count in
        var left = count
        while left >= batch {
            bus.post(contentsOf: run)
            left -= batch
        }
        if left > 0 { bus.post(contentsOf: run[..<left]) }
    }
    withExtendedLifetime((sink, other)) {}
    precondition(counter.value > 0)
    return result
}

/// The bus feeding OpenCombine's generic operators (here `filter` then `Sink`): what a module
/// pipeline pays when an operator is not one of the bus's own (applied after type erasure, so
/// the bus publisher's fast-path overloads do not apply).
func busThroughOpenCombineFilter(_ n: Int, eventsPerRun: Int) -> Double {
    let counter = Counter()
    let bus = Bus()
    let sinks = (0..<n).map { _ in
        bus.publisher(for: try! EventPattern("bench.*")).eraseToAnyPublisher()
            .filter { _ in true }.sink { _ in counter.value &+= 1 }
    }
    let event = Event(name: "bench.tick")
    let result = measure(subscribers: n, eventsPerRun: eventsPerRun) { count in
        for _ in 0..<count { bus.post(event) }
    }
    withExtendedLifetime(sinks) {}
    precondition(counter.value > 0)
    return result
}

/// The bus's own `filter` (``EventPipeline``): the predicate runs in the bus subscription, then
/// the closure sink. Half the events pass, so the predicate's cost shows on every event and the
/// sink's on half (ns are per event reaching the subscription).
func busFastFilter(_ n: Int, eventsPerRun: Int) -> Double {
    let counter = Counter()
    let bus = Bus()
    let sinks = (0..<n).map { _ in
        bus.publisher(for: try! EventPattern("bench.*"))
            .filter { $0.sequence & 1 == 0 }
            .sink { _ in counter.value &+= 1 }
    }
    let other = bus.publisher(for: try! EventPattern("fs.>")).sink { _ in }
    let event = Event(name: "bench.tick")
    let result = measure(subscribers: n, eventsPerRun: eventsPerRun) { count in
        for _ in 0..<count { bus.post(event) }
    }
    withExtendedLifetime((sinks, other)) {}
    precondition(counter.value > 0)
    return result
}

/// The bus's own `map` then `filter` (``EventPipeline``) into the closure sink.
func busFastMapFilter(_ n: Int, eventsPerRun: Int) -> Double {
    let counter = Counter()
    let bus = Bus()
    let sinks = (0..<n).map { _ in
        bus.publisher(for: try! EventPattern("bench.*"))
            .map { $0.sequence }
            .filter { $0 & 1 == 0 }
            .sink { counter.value &+= Int($0 & 1) + 1 }
    }
    let event = Event(name: "bench.tick")
    let result = measure(subscribers: n, eventsPerRun: eventsPerRun) { count in
        for _ in 0..<count { bus.post(event) }
    }
    withExtendedLifetime(sinks) {}
    precondition(counter.value > 0)
    return result
}

func dispatchBenchmark(eventsPerRun: Int) {
    print("post → N sinks, ns per delivery (best of 5, \(eventsPerRun) deliveries per run)")
    print("N      raw+lock  PassthroughSubject  Bus→sink  Bus/raw+lock  PassthroughSubject/Bus")
    var perDelivery: [Int: Double] = [:]
    for n in [1, 10, 100] {
        let raw = rawClosuresBehindLock(n, eventsPerRun: eventsPerRun)
        let subject = passthroughSubject(n, eventsPerRun: eventsPerRun)
        let ours = bus(n, eventsPerRun: eventsPerRun)
        perDelivery[n] = ours
        print(String(format: "%-6d %8.1f  %18.1f  %8.1f  %11.2fx  %21.2fx",
                     n, raw, subject, ours, ours / raw, subject / ours))
    }
    let batched = busBatch(512, eventsPerRun: eventsPerRun)
    print(String(format: "post(contentsOf:) of 512 events → 1 sink: %.1f ns per event, %.2fx Bus→sink at N=100",
                 batched, batched / perDelivery[100]!))
    print("Targets: Bus/raw+lock ≤ 2x at N=1 and N=10; PassthroughSubject/Bus ≥ 3x at N=10;")
    print("a batch of 512 ≤ 1.2x Bus→sink at N=100.")
    print()
    print("Operators on a bus publisher, ns per delivery (same run, best of 3 interleaved rounds)")
    print("N      Bus→sink  Bus→filter→sink  Bus→map→filter→sink  Bus→OpenCombine filter→Sink  filter/sink  OpenCombine/filter")
    for n in [1, 10, 100] {
        // Three interleaved rounds, best of each: a burst of load from other processes then
        // hits every column alike instead of one of them.
        var plain = Double.infinity, filtered = Double.infinity
        var mapped = Double.infinity, generic = Double.infinity
        for _ in 0..<3 {
            plain = min(plain, bus(n, eventsPerRun: eventsPerRun))
            filtered = min(filtered, busFastFilter(n, eventsPerRun: eventsPerRun))
            mapped = min(mapped, busFastMapFilter(n, eventsPerRun: eventsPerRun))
            generic = min(generic, busThroughOpenCombineFilter(n, eventsPerRun: eventsPerRun))
        }
        print(String(format: "%-6d %8.1f  %15.1f  %19.1f  %27.1f  %10.2fx  %17.2fx",
                     n, plain, filtered, mapped, generic, filtered / plain, generic / filtered))
    }
    print("Target at N=10: Bus→filter→sink ≤ 2x Bus→sink.")
}
