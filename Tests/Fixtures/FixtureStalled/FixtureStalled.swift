import Dispatch
import EventBusKit
#if canImport(Glibc)
import Glibc
#endif

/// Released by the test through `fixture_stalled_release`.
let gate = DispatchSemaphore(value: 0)

/// Test fixture: blocks its queue on the first `test.>` event until the test releases it — in
/// the test's process through `fixture_stalled_release`, or, with `release_file` in its config,
/// by creating that file (a module in a real eventbusd that drains only when the test lets it) —
/// then counts what arrives; on `test.report` posts `result.stalled` with the counts.
final class Stalled: EventBusModule {
    let name = "fixture-stalled"
    let version = "1.0.0"
    private var count = 0
    private var gaps = 0
    private var dropped = 0

    func activate(_ context: ModuleContext) throws {
        let releaseFile = try context.config.string("release_file", default: "")
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
                    if count == 0 {
                        if releaseFile.isEmpty {
                            gate.wait()
                        } else {
                            while access(releaseFile, F_OK) != 0 { usleep(10_000) }
                        }
                    }
                    count += 1
                }
            }
            .store(in: &context.cancellables)
    }
}

@_cdecl("eventbus_module") public func entry() -> UnsafeRawPointer { exportModule(Stalled.init) }

/// Unblocks the stalled module.
@_cdecl("fixture_stalled_release") public func release() { gate.signal() }
