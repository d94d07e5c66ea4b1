import EventBusKit

/// Benchmark fixture: for each `bench.event`, records how long after it was made it reached
/// the module (`CLOCK_MONOTONIC`, the same clock in every process); on `bench.report` posts
/// `bench.result` with the count and the 50th and 99th percentile in nanoseconds, and starts
/// over.
final class LatencyProbe: EventBusModule {
    let name = "fixture-latency-probe"
    let version = "1.0.0"
    private var latencies: [UInt64] = []

    func activate(_ context: ModuleContext) throws {
        latencies.reserveCapacity(1 << 20)
        try context.bus.publisher(for: "bench.event", "bench.report").sink { [unowned self] event in
            if event.name == "bench.event" {
                latencies.append(MonotonicClock.now() &- event.monotonicNanoseconds)
                return
            }
            let sorted = latencies.sorted()
            func percentile(_ p: Double) -> Int64 {
                sorted.isEmpty ? 0 : Int64(sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))])
            }
            context.bus.post("bench.result", source: "probe", fields: [
                "count": .int(Int64(sorted.count)), "p50_ns": .int(percentile(0.5)), "p99_ns": .int(percentile(0.99)),
            ])
            latencies.removeAll(keepingCapacity: true)
        }
        .store(in: &context.cancellables)
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(LatencyProbe.init) }
