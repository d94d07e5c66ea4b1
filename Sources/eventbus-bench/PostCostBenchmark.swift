import EventBusKit
import Foundation

// The fixed cost of one post: `events` posts of one event to `subscribers` closure
// sinks, one at a time or in batches through `post(contentsOf:)`, after a warm-up that builds
// routes and buffers. Prints ns per post.
//
// Small and single-threaded so that callgrind can count it — instructions and allocations, which
// stay repeatable on a loaded machine where time does not. The posting loop is its own function,
// `postCostLoop`, so
//   valgrind --tool=callgrind --toggle-collect='*postCostLoop*' eventbus-bench post-cost 100000
// collects exactly the posts (the warm-up too: it runs the same function, 10 000 more events):
// instructions per post = Ir / (events + 10 000), and the calls to `malloc` in the profile
// (`callgrind_annotate --inclusive=yes --tree=calling`) are the allocations.

/// The posts themselves; kept out of line so callgrind can collect this function alone.
@inline(never)
func postCostLoop(bus: Bus, event: Event, events: Int, batch: Int) {
    if batch <= 1 {
        for _ in 0..<events { bus.post(event) }
        return
    }
    let run = [Event](repeating: event, count: batch)
    var left = events
    while left >= batch {
        bus.post(contentsOf: run)
        left -= batch
    }
    if left > 0 { bus.post(contentsOf: run[..<left]) }
}

func postCostBenchmark(events: Int, subscribers: Int, batch: Int) {
    let counter = Counter()
    let bus = Bus()
    let sinks = (0..<subscribers).map { _ in
        bus.publisher(for: try! EventPattern("bench.*")).sink { _ in counter.value &+= 1 }
    }
    // An unrelated subscriber, so routing has something to skip (as in `dispatch`).
    let other = bus.publisher(for: try! EventPattern("fs.>")).sink { _ in }
    let event = Event(name: "bench.tick")
    postCostLoop(bus: bus, event: event, events: min(events, 10_000), batch: batch)  // warm-up

    let start = MonotonicClock.now()
    postCostLoop(bus: bus, event: event, events: events, batch: batch)
    let elapsed = Double(MonotonicClock.now() - start)
    withExtendedLifetime((sinks, other)) {}
    precondition(counter.value == subscribers * (events + min(events, 10_000)), "every post reached every sink")
    let mode = batch <= 1 ? "one post per event" : "post(contentsOf:) in batches of \(batch)"
    print("\(events) events → \(subscribers) sink(s), \(mode)")
    print(String(format: "%.1f ns per post", elapsed / Double(events)))
}
