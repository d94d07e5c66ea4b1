import Dispatch
import EventBusKit

/// Released by the test through `fixture_stalled_release`.
let gate = DispatchSemaphore(value: 0)

/// Test fixture: blocks its queue on the first `test.>` event until the test releases it, then
/// counts what arrives; on `test.report` posts `result.stalled` with the counts.
final class Stalled: EventBusModule {
    let name = "fixture-stalled"
    let version = "1.0.0"
    private var count = 0
    private var gaps = 0
    private var dropped = 0

    func activate(_ context: ModuleContext) throws {
        try context.bus.publisher(for: "test.>")
            .sink { [unowned self] event in
                if let gap = event.gap {
                    gaps += 1
                    dropped += gap.dropped
                } else if event.name == "test.report" {
                    context.bus.post("result.stalled", source: "stalled", fields: [
                        "count": .int(Int64(count)), "gaps": .int(Int64(gaps)), "dropped": .int(Int64(dropped)),
                    ])
                } else {
                    if count == 0 { gate.wait() }
                    count += 1
                }
            }
            .store(in: &context.cancellables)
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Stalled.init) }

/// Unblocks the stalled module.
@_cdecl("fixture_stalled_release") public func release() { gate.signal() }
