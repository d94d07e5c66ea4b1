#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// Runs `body` on a new, detached POSIX thread — the reader and monitor threads of the
/// journal and devices sources, which block in libsystemd for their whole life and so are
/// kept off Dispatch's pool. Returns the thread, or the error `pthread_create` gave (no thread
/// ran).
func startDetachedThread(_ body: @escaping () -> Void) -> Result<pthread_t, System.CallError> {
    final class Box {
        let body: () -> Void
        init(_ body: @escaping () -> Void) { self.body = body }
    }
    var thread = pthread_t()
    let context = Unmanaged.passRetained(Box(body))
    let result = pthread_create(&thread, nil, { raw in
        Unmanaged<Box>.fromOpaque(raw!).takeRetainedValue().body()
        return nil
    }, context.toOpaque())
    guard result == 0 else {
        context.release()
        // pthread_create returns its error number rather than setting errno.
        return .failure(System.CallError(call: "pthread_create", path: "a detached thread", errno: result))
    }
    pthread_detach(thread)
    return .success(thread)
}
