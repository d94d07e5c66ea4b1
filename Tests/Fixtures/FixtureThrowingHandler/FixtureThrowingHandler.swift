import EventBusKit

struct HandlerFailure: Error, CustomStringConvertible {
    var description: String { "fixture handler fails on purpose" }
}

/// Test fixture: its handler throws for events with `fail: true` and counts the others; on
/// `test.report` posts `result.throwing` with the count.
final class ThrowingHandler: EventBusModule {
    let name = "fixture-throwing-handler"
    let version = "1.0.0"
    private var count = 0

    func activate(_ context: ModuleContext) throws {
        try context.bus.publisher(for: "test.>").handle(in: context) { [unowned self] event in
            if event["fail"]?.boolValue == true { throw HandlerFailure() }
            if event.name == "test.report" {
                context.bus.post("result.throwing", source: "throwing", fields: ["count": .int(Int64(count))])
            } else {
                count += 1
            }
        }
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(ThrowingHandler.init) }
