#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The non-recursive mutex of the operator cores (`MergeInner`, `CombineLatestInner`).
///
/// A plain pthread mutex rather than `Synchronization.Mutex`: the cores' drain loops unlock around
/// every downstream call and re-lock afterwards, which a closure-scoped `withLock` cannot express.
/// It is deliberately not recursive — the cores never call out (downstream or upstream) while
/// holding it — and debug builds make it error-checking, so a re-entrant lock is a crash at the
/// faulty line instead of a silent deadlock.
final class OperatorLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)

    init() {
        mutex.initialize(to: pthread_mutex_t())
        #if DEBUG
        var attributes = pthread_mutexattr_t()
        pthread_mutexattr_init(&attributes)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ERRORCHECK))
        pthread_mutex_init(mutex, &attributes)
        pthread_mutexattr_destroy(&attributes)
        #else
        pthread_mutex_init(mutex, nil)
        #endif
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    func lock() {
        let result = pthread_mutex_lock(mutex)
        assert(result == 0, "OperatorLock: lock failed (\(result)); re-entrant locking is a bug")
    }

    func unlock() {
        let result = pthread_mutex_unlock(mutex)
        assert(result == 0, "OperatorLock: unlock failed (\(result))")
    }
}

/// A first-in-first-out queue with amortised O(1) `append` and `popFirst`.
///
/// Under unlimited demand, values that arrive from other threads while one thread is delivering
/// pile up here; `Array.removeFirst()` would make draining a burst of n of them O(n²).
struct FIFO<Element> {
    private var storage: [Element?] = []
    private var head = 0

    var isEmpty: Bool { head == storage.count }

    mutating func append(_ element: Element) {
        storage.append(element)
    }

    mutating func popFirst() -> Element? {
        guard head < storage.count else { return nil }
        let element = storage[head]
        storage[head] = nil  // release the value now, not when the storage is compacted
        head += 1
        if head == storage.count {
            storage.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64, head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
        return element
    }

    mutating func removeAll() {
        storage.removeAll()
        head = 0
    }
}

/// The upstream subscriptions of a fan-in operator core (`MergeInner`, `CombineLatestInner`), by
/// index, and which upstreams have completed. Guarded by the core's lock; the subscriptions it
/// hands back are cancelled or requested from outside it.
struct UpstreamSlots {
    private var subscriptions: [Subscription?]
    private var completed: [Bool]
    private var completedCount = 0

    init(count: Int) {
        subscriptions = Array(repeating: nil, count: count)
        completed = Array(repeating: false, count: count)
    }

    var isEmpty: Bool { subscriptions.isEmpty }
    var allCompleted: Bool { completedCount == subscriptions.count }

    subscript(index: Int) -> Subscription? { subscriptions[index] }

    func hasCompleted(_ index: Int) -> Bool { completed[index] }

    /// The subscriptions held, but the one at `excluded`.
    func live(except excluded: Int? = nil) -> [Subscription] {
        subscriptions.indices.compactMap { $0 == excluded ? nil : subscriptions[$0] }
    }

    /// Keeps `subscription` for upstream `index`; false (the caller cancels it) when that upstream
    /// has a subscription already or has completed.
    mutating func accept(_ subscription: Subscription, at index: Int) -> Bool {
        guard subscriptions[index] == nil, !completed[index] else { return false }
        subscriptions[index] = subscription
        return true
    }

    /// Upstream `index` completed: its subscription is dropped.
    mutating func complete(_ index: Int) {
        completed[index] = true
        completedCount += 1
        subscriptions[index] = nil
    }

    /// Drops every subscription and returns those that were held, to cancel outside the lock.
    mutating func removeAll() -> [Subscription] {
        defer { subscriptions = Array(repeating: nil, count: subscriptions.count) }
        return live()
    }
}
