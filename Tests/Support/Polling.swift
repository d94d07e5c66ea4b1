import Foundation
import Synchronization

/// Polls `condition` until it holds or `timeout` passes. The timeout only bounds a broken test:
/// it is generous on purpose, so a slow machine (or TSan) never fails a correct one — tests
/// never assert how long something took.
public func eventually(timeout: Duration = .seconds(60), _ condition: () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if condition() { return true }
        try? await Task.sleep(for: .milliseconds(2))
    }
    return condition()
}

/// A thread-safe box for what a test collects from other threads.
public final class Collected<Value: Sendable>: Sendable {
    private let storage: Mutex<Value>
    public init(_ initial: Value) { storage = Mutex(initial) }
    public var value: Value { storage.withLock { $0 } }
    public func update<R>(_ body: (inout Value) -> R) -> R { storage.withLock { body(&$0) } }
}
