import EventBusKit
#if canImport(Glibc)
import Glibc
#endif

/// Test fixture: counts the events matching its `pattern` (default `test.>`) and the gap notices
/// it gets; on `test.report` posts `result.counter.<id>` with the counts. Logs its first event,
/// which the eventbusd process test waits for.
final class Counter: EventBusModule {
    let name = "fixture-counter"
    let version = "1.0.0"
    static let configKeys: ModuleConfigKeys = [
        .string("pattern", default: "test.>", help: "the events it counts"),
        .string("id", default: "counter", help: "names its report, result.counter.<id>"),
        .string("note", help: "not read: lets a test change the section without changing what it does"),
        .int("activation_delay_ms", default: 0, minimum: 0, maximum: 20_000, help: "how long activate takes before it subscribes"),
    ]
    private var count = 0
    private var gaps = 0
    private var dropped = 0
    private var pattern = ""

    func activate(_ context: ModuleContext) throws {
        // A slow start, before it subscribes: what a client posts meanwhile must still reach it.
        let delay = try context.config.int("activation_delay_ms")
        if delay > 0 { usleep(UInt32(delay) * 1000) }
        pattern = try context.config.string("pattern")
        let id = try context.config.string("id")
        try context.bus.publisher(for: pattern, "test.report")
            .sink { [unowned self] event in
                if let gap = event.gap {
                    gaps += 1
                    dropped += gap.dropped
                } else if event.name == "test.report" {
                    context.bus.post("result.counter.\(id)", source: id, fields: [
                        "count": .int(Int64(count)), "gaps": .int(Int64(gaps)), "dropped": .int(Int64(dropped)),
                    ])
                } else {
                    if count == 0 { context.log.info("first event \(event.name)") }
                    count += 1
                }
            }
            .store(in: &context.cancellables)
    }

    /// Applies a section with the same pattern in place; a new pattern needs new subscriptions.
    func reconfigure(_ config: ModuleConfig, context: ModuleContext) throws -> ReconfigureResult {
        try config.string("pattern") == pattern ? .applied : .reactivate
    }

    func deactivate() {}
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Counter.init) }
