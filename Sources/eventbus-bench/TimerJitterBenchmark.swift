import Dispatch
import EventBusKit
import Foundation
import Synchronization

// Timer jitter: a bus timer every 10 ms, how late each tick reaches its subscriber, on a quiet
// machine and with CPU hogs on every core — side by side with a bare DispatchSourceTimer at the
// same period in the same window (the floor the bus timer is built on).

/// Lateness samples in ns.
private final class Samples: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [Int64] = []
    func add(_ value: Int64) { lock.withLock { values.append(value) } }
    var all: [Int64] { lock.withLock { values } }
}

private func percentile(_ values: [Int64], _ p: Double) -> Double {
    guard !values.isEmpty else { return .nan }
    let sorted = values.sorted()
    let index = min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)
    return Double(sorted[max(0, index)]) / 1e6
}

/// Runs both timers for `seconds`, with `hogs` threads spinning meanwhile. Returns
/// (bus tick lateness at the subscriber, bare DispatchSourceTimer lateness), in ns.
private func jitterRun(seconds: Double, hogs: Int) -> (bus: [Int64], dispatch: [Int64]) {
    let stop = Atomic<Bool>(false)
    let hogsDone = DispatchGroup()
    for _ in 0..<hogs {
        hogsDone.enter()
        Thread {
            var x: UInt64 = 1
            while !stop.load(ordering: .relaxed) {
                for _ in 0..<10_000 { x = x &* 6364136223846793005 &+ 1442695040888963407 }
            }
            if x == 42 { print("") }  // keep the loop
            hogsDone.leave()
        }.start()
    }
    let period = UInt64(10_000_000)
    let busSamples = Samples(), dispatchSamples = Samples()
    let bus = Bus()
    // Lateness at the subscriber: from the tick's scheduled time to the sink's call.
    let cancellable = try! bus.timer(every: .milliseconds(10)).sink { event in
        guard let tick = event.timerTick else { return }
        busSamples.add(Int64(Date().timeIntervalSince(tick.scheduled) * 1e9))
    }
    let queue = DispatchQueue(label: "bench.bare-timer")
    let timer = DispatchSource.makeTimerSource(queue: queue)
    let start = MonotonicClock.now()
    let fired = Counter()
    timer.schedule(deadline: .now() + .nanoseconds(Int(period)), repeating: .nanoseconds(Int(period)), leeway: .nanoseconds(0))
    timer.setEventHandler {
        fired.value += Int(timer.data)
        let due = start + UInt64(fired.value) * period
        dispatchSamples.add(Int64(MonotonicClock.now()) - Int64(due))
    }
    timer.resume()
    Thread.sleep(forTimeInterval: seconds)
    timer.cancel()
    cancellable.cancel()
    stop.store(true, ordering: .relaxed)
    hogsDone.wait()
    // The first ticks include start-up: drop the first 10 of each.
    return (Array(busSamples.all.dropFirst(10)), Array(dispatchSamples.all.dropFirst(10)))
}

func timerJitterBenchmark(seconds: Double) {
    let cores = ProcessInfo.processInfo.activeProcessorCount
    print("Timer lateness at a 10 ms period, ms (\(seconds) s per run; bus: scheduled → subscriber's sink)")
    print("load                          ticks  bus p50  bus p99  bus max   bare DispatchSourceTimer p50 / p99 / max")
    for (label, hogs) in [("quiet", 0), ("\(2 * cores) spinning threads (\(cores) cores)", 2 * cores)] {
        let (ours, bare) = jitterRun(seconds: seconds, hogs: hogs)
        print(String(format: "%-28@  %5d  %7.3f  %7.3f  %7.3f   %.3f / %.3f / %.3f", label as NSString, ours.count,
                     percentile(ours, 0.5), percentile(ours, 0.99), percentile(ours, 1.0),
                     percentile(bare, 0.5), percentile(bare, 0.99), percentile(bare, 1.0)))
    }
    print("Target: p99 ≤ 1 ms under the CPU hog.")
}
