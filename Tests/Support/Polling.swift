import Foundation

/// How long a test waits for something that must happen. It only bounds a broken test, so it is
/// generous on purpose: CI runs every suite at once on two cores, where a check that takes a
/// second alone has taken over 60 s to start, load two modules in child processes and exit.
/// Tests never assert how long something took.
public let patience: Duration = .seconds(patienceSeconds)
/// ``patience`` in whole seconds, for timeouts given as a number (`timeval`, shell `timeout`).
public let patienceSeconds = 180

/// Polls `condition` until it holds or `timeout` passes.
public func eventually(timeout: Duration = patience, _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return condition()
}

/// A thread-safe box for what a test collects from other threads. An `NSLock` (a pthread mutex),
/// not `Synchronization.Mutex`: the thread sanitizer cannot see the latter's futex and reported
/// its locked sections as racing.
public final class Collected<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `storage` is only touched under `lock`.
    private let lock = NSLock()
    private var storage: Value
    public init(_ initial: Value) { storage = initial }
    public var value: Value { lock.withLock { storage } }
    public func update<R>(_ body: (inout Value) -> R) -> R { lock.withLock { body(&storage) } }
}

/// ``patience`` from now, for a `DispatchSemaphore` or `DispatchGroup` wait.
public func patienceDeadline() -> DispatchTime {
    .now() + .seconds(patienceSeconds)
}
