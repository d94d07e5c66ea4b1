import EventBusKit

/// Derives events from events: every `interval_seconds` it posts `summary.rate` with how many
/// events matching `match` arrived in that window, per event name, and the rate in events/s.
///
/// The matching events and the module's timer ticks are **merged** into one stream and folded
/// with **scan** into a window that a tick closes. Both reach the module through its one mailbox
/// in bus order, so every event lands in exactly one window: the one its tick closed.
final class RateSummary: EventBusModule {
    let name = "rate-summary"
    let version = "1.0.0"
    /// What its config section may hold; the host refuses anything else, with file and line.
    static let configKeys: ModuleConfigKeys = [
        .strings("match", default: ["user.>"], help: "the events it counts (NATS-style patterns)"),
        .double("interval_seconds", default: 10, minimum: 0.001, maximum: 1e9, help: "the length of a window"),
    ]

    static let summaryName = "summary.rate"

    func activate(_ context: ModuleContext) throws {
        let patterns = try context.config.strings("match").map(EventPattern.init)
        // Its range is declared, so the host has refused anything outside it.
        let seconds = try context.config.double("interval_seconds")
        // Whole nanoseconds, so the schedule reads "every 0.2 seconds" rather than a binary fraction.
        let schedule = try TimerSchedule.every(.nanoseconds(Int64((seconds * 1e9).rounded())))
        let bus = context.bus

        // One subscription for all patterns: an event several of them match arrives once.
        let matching = bus.publisher(for: patterns).map(Window.Input.event)
        // A gap notice can arrive here too (ticks the module fell behind on); only ticks close
        // a window.
        let ticks = bus.timer(schedule)
            .filter { $0.timerTick != nil }
            .map(Window.Input.tick)

        matching.merge(with: ticks)
            .scan(Window(start: MonotonicClock.now())) { window, input in
                var window = window
                window.take(input)
                return window
            }
            .compactMap(\.closed)
            .sink { summary in bus.post(RateSummary.summaryName, source: "rate-summary", fields: summary.fields) }
            .store(in: &context.cancellables)
    }
}

/// The window being counted, and the summary of the one the last tick closed.
struct Window {
    enum Input {
        case event(Event)
        case tick(Event)
    }

    struct Summary {
        var counts: [String: Int]
        var dropped: Int
        var seconds: Double

        var fields: [String: FieldValue] {
            let total = counts.values.reduce(0, +)
            var fields: [String: FieldValue] = [
                "total": .int(Int64(total)),
                "per_second": .double(seconds > 0 ? Double(total) / seconds : 0),
                "window_seconds": .double(seconds),
                "dropped": .int(Int64(dropped)),
            ]
            for (name, count) in counts { fields["count." + name] = .int(Int64(count)) }
            return fields
        }
    }

    /// `CLOCK_MONOTONIC` nanoseconds at which this window opened.
    var start: UInt64
    var counts: [String: Int] = [:]
    /// Events the bus dropped for this module (its gap notices): lost, so not in `counts`.
    var dropped = 0
    /// Set by the tick that closed a window, until the next input.
    var closed: Summary?

    mutating func take(_ input: Input) {
        closed = nil
        switch input {
        case .event(let event):
            if let gap = event.gap {
                dropped += gap.dropped
                return
            }
            // `match: [">"]` would otherwise count the module's own output.
            guard event.name != RateSummary.summaryName else { return }
            counts[event.name, default: 0] += 1
        case .tick(let tick):
            let end = tick.monotonicNanoseconds
            closed = Summary(counts: counts, dropped: dropped,
                             seconds: Double(end > start ? end - start : 0) / 1e9)
            start = end
            counts = [:]
            dropped = 0
        }
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(RateSummary.init) }
