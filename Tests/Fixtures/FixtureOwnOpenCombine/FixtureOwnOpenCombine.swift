import EventBusKit
import OpenCombine

/// Test fixture: the mistake an author makes easily — a module target that depends on the
/// OpenCombine product directly besides EventBusKit, so OpenCombine is linked into the module a
/// second time. Before the preflight, it passed the ABI check and crashed the host in `activate`
/// (its `AnyCancellable` is not the SDK's). It must be refused before it is loaded.
final class OwnOpenCombine: EventBusModule {
    let name = "fixture-own-opencombine"
    let version = "1.0.0"

    func activate(_ context: ModuleContext) throws {
        let subject = PassthroughSubject<Int, Never>()
        subject.sink { _ in }.store(in: &context.cancellables)
        try context.bus.publisher(for: "test.>").sink { _ in subject.send(1) }.store(in: &context.cancellables)
    }

    func deactivate() {}
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(OwnOpenCombine.init) }
