import Glibc

/// State behind a `pthread_mutex_t`, for the systemd integration's state shared between the
/// caller's threads and its writer thread.
///
/// Why not `Synchronization.Mutex`: its contended path is a raw futex the thread sanitizer cannot
/// see, so TSan reports races between correctly locked sections (see the README's design notes;
/// the SDK's `Locked` is the same type, but internal to the SDK).
final class PthreadLocked<State>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var state: State

    init(_ state: State) {
        self.state = state
        mutex = .allocate(capacity: 1)
        pthread_mutex_init(mutex, nil)
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&state)
    }
}
