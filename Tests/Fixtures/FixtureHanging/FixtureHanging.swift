import EventBusKit
#if canImport(Glibc)
import Glibc
#endif

/// Test fixture: on `test.hang` its handler never returns (a loop that sleeps, so it does not
/// burn the machine's CPU while the host decides it is hung).
final class Hanging: EventBusModule {
    let name = "fixture-hanging"
    let version = "1.0.0"

    func activate(_ context: ModuleContext) throws {
        context.log.info("hanging fixture active")
        try context.bus.publisher(for: "test.hang").sink { _ in
            while true { usleep(10_000) }
        }
        .store(in: &context.cancellables)
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Hanging.init) }
