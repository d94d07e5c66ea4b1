import EventBusKit

/// Test fixture: crashes its process with `fatalError` on `test.crash`, or in `deactivate` after
/// `test.crash-at-stop`; counts other `test.>` events and on `test.report` posts
/// `result.crashing` with the count. Logs when it activates, so a test sees each (re)start.
final class Crashing: EventBusModule {
    let name = "fixture-crashing"
    let version = "1.0.0"
    private var count = 0
    private var crashAtStop = false

    func activate(_ context: ModuleContext) throws {
        context.log.info("crashing fixture active")
        try context.bus.publisher(for: "test.>").sink { [unowned self] event in
            switch event.name {
            case "test.crash": fatalError("fixture crashes on purpose")
            case "test.crash-at-stop": crashAtStop = true
            case "test.report":
                context.bus.post("result.crashing", source: "crashing", fields: ["count": .int(Int64(count))])
            default: count += 1
            }
        }
        .store(in: &context.cancellables)
    }

    func deactivate() {
        if crashAtStop { fatalError("fixture crashes in deactivate on purpose") }
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Crashing.init) }
