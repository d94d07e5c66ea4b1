#if canImport(Glibc)
import Glibc
#endif

/// State behind a `pthread_mutex_t`.
///
/// Why not `Synchronization.Mutex`: its contended path is a raw futex syscall that the thread
/// sanitizer cannot see, so TSan reports races between two correctly locked sections (measured
/// here on the mailbox). A pthread mutex costs the same uncontended and keeps TSan runs truthful.
///
/// SPI, not public API: the host shares it (`@_spi(EventBusHost) import EventBusKit`)
/// rather than keep a copy, but module authors do not see it.
@_spi(EventBusHost) public final class Locked<State>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var state: State

    public init(_ state: State) {
        self.state = state
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    @inline(__always)
    public func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
