#if canImport(Glibc)
import Glibc
#endif

/// State behind a `pthread_mutex_t`.
///
/// Why not `Synchronization.Mutex`: its contended path is a raw futex syscall that the thread
/// sanitizer cannot see, so TSan reports races between two correctly locked sections (measured
/// here on the mailbox). A pthread mutex costs the same uncontended and keeps TSan runs truthful.
///
/// The state lives in memory of its own, reached through a pointer, rather than in a stored
/// `var` of this class: Swift checks every access to a class's `var` for exclusivity at run time
/// (a call and a thread-local look-up), which callgrind showed as a quarter of the bus's
/// instructions per post; the mutex already makes the accesses exclusive.
///
/// SPI, not public API: the host shares it (`@_spi(EventBusHost) import EventBusKit`)
/// rather than keep a copy, but module authors do not see it.
@_spi(EventBusHost) public final class Locked<State>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let state: UnsafeMutablePointer<State>

    public init(_ state: State) {
        self.state = .allocate(capacity: 1)
        self.state.initialize(to: state)
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
        state.deinitialize(count: 1)
        state.deallocate()
    }

    @inline(__always)
    public func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state.pointee)
    }
}
