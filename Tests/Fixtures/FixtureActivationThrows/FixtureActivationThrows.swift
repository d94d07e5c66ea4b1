import EventBusKit

struct Refusal: Error, CustomStringConvertible {
    var description: String { "fixture refuses to start" }
}

/// Test fixture: subscribes to events and to a timer, then throws from `activate`; the host must
/// cancel both.
final class ActivationThrows: EventBusModule {
    let name = "fixture-activation-throws"
    let version = "1.0.0"

    func activate(_ context: ModuleContext) throws {
        try context.bus.publisher(for: "test.>").sink { _ in }.store(in: &context.cancellables)
        try context.bus.timer(every: .seconds(3600)).sink { _ in }.store(in: &context.cancellables)
        throw Refusal()
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(ActivationThrows.init) }
