import CNATS
import Synchronization

/// The bridge's JetStream context (nats.c's `jsCtx`), destroyed when the last of its users lets
/// go: the bridge, once it has closed the connection at stop, and each thread that calls nats.c's
/// JetStream functions with it — the exporter's and the durable importer's — once it has ended.
///
/// Why not simply at stop: `NATSBridge.stop(timeout:)` waits for those threads at most its
/// timeout, and a thread can be inside nats.c for longer (`js_PublishAsyncComplete` waits up to
/// 2 s for acknowledgements, a JetStream API request up to 2 s, on a loaded machine anything). A
/// context destroyed meanwhile is freed at once on a closed connection (its reply subscription
/// and timer let go of it within microseconds), and the thread's next JetStream call reads freed
/// memory: the exporter's `js_PublishAsyncComplete` locked a freed mutex (a SEGV under the
/// address sanitizer; `BridgeStopTests`). Without the sanitizer the freed memory is soon handed
/// out again, and a late call reads — or, `js_PublishMsgAsync` re-making the reply
/// subscription's fields, writes NULL into — whatever lives there now: the likely cause of a CI
/// run that died of `strlen` on NULL in a thread named `eventbus.export`.
///
/// `jsCtx_Destroy` runs on whichever of those threads lets go last: never inside a nats.c
/// callback.
final class JetStreamContext: @unchecked Sendable {
    // @unchecked: `pointer` is immutable; nats.c's context is thread-safe; `users` is atomic.

    let pointer: OpaquePointer
    /// The bridge's hold, and one per running thread that uses the context.
    private let users = Atomic<Int>(1)

    /// Takes over `pointer` (from `natsConnection_JetStream`) with the caller's hold.
    init(_ pointer: OpaquePointer) {
        self.pointer = pointer
    }

    /// A thread that will use the context: taken before the thread starts (so the bridge's
    /// release cannot come first), released when it ends.
    func hold() {
        users.add(1, ordering: .relaxed)
    }

    /// Lets go; the last one destroys the context.
    func release() {
        // Acquiring and releasing: whatever a user did with the context happens before its destruction.
        if users.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 { jsCtx_Destroy(pointer) }
    }
}
