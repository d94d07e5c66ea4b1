#if canImport(Glibc)
import Glibc
#endif

/// Runs `body` on a new, detached POSIX thread — the reader and monitor threads of the
/// journal and devices sources, which block in libsystemd for their whole life and so are
/// kept off Dispatch's pool. Returns the thread, or the `errno` `pthread_create` gave (no
/// thread ran).
func startDetachedThread(_ body: @escaping () -> Void) -> Result<pthread_t, DetachedThreadError> {
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
        return .failure(DetachedThreadError(errno: result))
    }
    pthread_detach(thread)
    return .success(thread)
}

/// Why ``startDetachedThread(_:)`` started no thread.
struct DetachedThreadError: Error {
    var errno: Int32
}
