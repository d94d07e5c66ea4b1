import EventBusKit
import Foundation
import Synchronization

/// The error the operator tests fail publishers with.
struct OperatorTestError: Error, Equatable {
    let id: Int
    init(_ id: Int) { self.id = id }
}

/// A subscriber that records everything it receives and whose demand the test controls.
///
/// It also checks the two rules an operator must keep towards its downstream, whatever the test:
/// - `overlaps`: calls that entered while another one was still running (concurrent delivery);
/// - `demandViolations`: values received beyond the demand it had requested.
/// Demand must be requested through `request(_:)` (or returned by `onValue`) for that accounting.
final class TestSubscriber<Input, Failure: Error>: Subscriber, @unchecked Sendable {
    enum Event {
        case subscription
        case value(Input)
        case completion(Subscribers.Completion<Failure>)
    }

    let combineIdentifier = CombineIdentifier()
    private let initialDemand: Subscribers.Demand
    private let onValue: (TestSubscriber, Input) -> Subscribers.Demand
    private let lock = NSLock()
    private var _events: [Event] = []
    private var _subscription: Subscription?
    private var outstanding = Subscribers.Demand.none
    private var _demandViolations = 0
    private let inFlight = Atomic<Int>(0)
    private let _overlaps = Atomic<Int>(0)

    /// - Parameters:
    ///   - initialDemand: requested when the subscription arrives (`.none`: nothing).
    ///   - onValue: runs inside `receive(_:)`; its result is returned as additional demand.
    init(
        initialDemand: Subscribers.Demand = .none,
        onValue: @escaping (TestSubscriber, Input) -> Subscribers.Demand = { _, _ in .none }
    ) {
        self.initialDemand = initialDemand
        self.onValue = onValue
    }

    var events: [Event] { lock.withLock { _events } }
    var values: [Input] {
        events.compactMap { if case .value(let value) = $0 { value } else { nil } }
    }
    var completions: [Subscribers.Completion<Failure>] {
        events.compactMap { if case .completion(let completion) = $0 { completion } else { nil } }
    }
    var subscriptionCount: Int {
        events.filter { if case .subscription = $0 { true } else { false } }.count
    }
    var demandViolations: Int { lock.withLock { _demandViolations } }
    var overlaps: Int { _overlaps.load(ordering: .relaxed) }

    func request(_ demand: Subscribers.Demand) {
        let subscription = lock.withLock {
            outstanding += demand
            return _subscription
        }
        subscription?.request(demand)
    }

    func cancel() {
        lock.withLock { _subscription }?.cancel()
    }

    func receive(subscription: Subscription) {
        enter()
        defer { leave() }
        lock.withLock {
            _events.append(.subscription)
            _subscription = subscription
        }
        if initialDemand > 0 { request(initialDemand) }
    }

    func receive(_ input: Input) -> Subscribers.Demand {
        enter()
        defer { leave() }
        lock.withLock {
            _events.append(.value(input))
            if outstanding > 0 { outstanding -= 1 } else { _demandViolations += 1 }
        }
        let more = onValue(self, input)
        lock.withLock { outstanding += more }
        return more
    }

    func receive(completion: Subscribers.Completion<Failure>) {
        enter()
        defer { leave() }
        lock.withLock { _events.append(.completion(completion)) }
    }

    // Nested calls on the same thread are legal in Combine; only overlap across threads is not.
    // The operators under test never nest (they drain), so any depth > 1 is reported.
    private func enter() {
        if inFlight.add(1, ordering: .acquiringAndReleasing).newValue > 1 {
            _overlaps.add(1, ordering: .relaxed)
        }
    }

    private func leave() {
        inFlight.subtract(1, ordering: .acquiringAndReleasing)
    }
}

extension TestSubscriber.Event: Equatable where Input: Equatable, Failure: Equatable {}

/// A subscription that records every `request` and `cancel` it gets.
final class TestSubscription: Subscription, @unchecked Sendable {
    enum Event: Equatable {
        case requested(Subscribers.Demand)
        case cancelled
    }

    let combineIdentifier = CombineIdentifier()
    private let lock = NSLock()
    private var _history: [Event] = []

    var history: [Event] { lock.withLock { _history } }

    func request(_ demand: Subscribers.Demand) {
        lock.withLock { _history.append(.requested(demand)) }
    }

    func cancel() {
        lock.withLock { _history.append(.cancelled) }
    }
}

/// A publisher for one subscriber that sends exactly what the test tells it to, whatever the
/// demand — so a test can check the operator's own accounting (and feed it misbehaving input) —
/// and whose `subscription` records what the operator requested and cancelled.
final class TestPublisher<Output, Failure: Error>: Publisher, @unchecked Sendable {
    let subscription = TestSubscription()
    private let lock = NSLock()
    private var subscriber: AnySubscriber<Output, Failure>?

    var isSubscribed: Bool { lock.withLock { subscriber != nil } }

    func receive<S: Subscriber>(subscriber: S) where S.Input == Output, S.Failure == Failure {
        lock.withLock { self.subscriber = AnySubscriber(subscriber) }
        subscriber.receive(subscription: subscription)
    }

    /// Sends `value` and returns the demand the subscriber returned.
    @discardableResult
    func send(_ value: Output) -> Subscribers.Demand {
        lock.withLock { subscriber }?.receive(value) ?? .none
    }

    func send(completion: Subscribers.Completion<Failure>) {
        lock.withLock { subscriber }?.receive(completion: completion)
    }

    /// Hands the subscriber another subscription, as a misbehaving upstream would.
    func resubscribe(with subscription: Subscription) {
        lock.withLock { subscriber }?.receive(subscription: subscription)
    }
}

/// Runs `body(index)` on `count` threads started together, and returns when all have finished.
func runConcurrently(threads count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let ready = DispatchGroup()
    let start = DispatchSemaphore(value: 0)
    let done = DispatchGroup()
    for index in 0..<count {
        ready.enter()
        done.enter()
        let thread = Thread {
            ready.leave()
            start.wait()
            body(index)
            done.leave()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }
    ready.wait()
    for _ in 0..<count { start.signal() }
    done.wait()
}

/// A value shared between test threads.
final class SharedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var _value: Value
    init(_ value: Value) { _value = value }
    var value: Value {
        get { lock.withLock { _value } }
        set { lock.withLock { _value = newValue } }
    }
}

/// A scheduler whose clock moves only when the test says so, for time-based operators.
///
/// `advance(by:)` runs every action due by the new time, in time order (actions due at the same
/// time in the order they were scheduled), moving `now` to each one's time before running it; an
/// action an action schedules runs in the same advance if it is due by then. `advance(by: .zero)`
/// runs what is due now — what `schedule(options:)` queued. Actions run on the advancing thread,
/// outside the scheduler's lock.
final class VirtualTimeScheduler: Scheduler, @unchecked Sendable {
    struct SchedulerTimeType: Strideable, Hashable {
        let nanoseconds: Int

        func distance(to other: Self) -> Stride { Stride(nanoseconds: other.nanoseconds - nanoseconds) }
        func advanced(by stride: Stride) -> Self { Self(nanoseconds: nanoseconds + stride.nanoseconds) }
        static func < (lhs: Self, rhs: Self) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

        struct Stride: SchedulerTimeIntervalConvertible, Comparable, SignedNumeric, Hashable {
            var nanoseconds: Int

            init(nanoseconds: Int) { self.nanoseconds = nanoseconds }
            init(integerLiteral value: Int) { nanoseconds = value }
            init?<T: BinaryInteger>(exactly source: T) {
                guard let value = Int(exactly: source) else { return nil }
                nanoseconds = value
            }

            var magnitude: UInt { nanoseconds.magnitude }

            static func seconds(_ s: Int) -> Self { Self(nanoseconds: s * 1_000_000_000) }
            static func seconds(_ s: Double) -> Self { Self(nanoseconds: Int(s * 1_000_000_000)) }
            static func milliseconds(_ ms: Int) -> Self { Self(nanoseconds: ms * 1_000_000) }
            static func microseconds(_ us: Int) -> Self { Self(nanoseconds: us * 1_000) }
            static func nanoseconds(_ ns: Int) -> Self { Self(nanoseconds: ns) }

            static func < (lhs: Self, rhs: Self) -> Bool { lhs.nanoseconds < rhs.nanoseconds }
            static func + (lhs: Self, rhs: Self) -> Self { Self(nanoseconds: lhs.nanoseconds + rhs.nanoseconds) }
            static func - (lhs: Self, rhs: Self) -> Self { Self(nanoseconds: lhs.nanoseconds - rhs.nanoseconds) }
            static func * (lhs: Self, rhs: Self) -> Self { Self(nanoseconds: lhs.nanoseconds * rhs.nanoseconds) }
            static func *= (lhs: inout Self, rhs: Self) { lhs = lhs * rhs }
        }
    }

    typealias SchedulerOptions = Never

    private struct Pending {
        let id: Int
        var due: SchedulerTimeType
        /// The order actions due at the same time run in.
        var sequence: Int
        let interval: SchedulerTimeType.Stride?
        let action: () -> Void
    }

    private let lock = NSLock()
    private var _now = SchedulerTimeType(nanoseconds: 0)
    private var pending: [Pending] = []
    private var nextID = 0
    private var nextSequence = 0

    var now: SchedulerTimeType { lock.withLock { _now } }
    var minimumTolerance: SchedulerTimeType.Stride { .zero }

    /// Actions scheduled and neither run (one-shot) nor cancelled; a repeating one counts until
    /// cancelled.
    var pendingCount: Int { lock.withLock { pending.count } }

    func schedule(options: SchedulerOptions?, _ action: @escaping () -> Void) {
        _ = add(due: nil, interval: nil, action)
    }

    func schedule(
        after date: SchedulerTimeType,
        tolerance: SchedulerTimeType.Stride,
        options: SchedulerOptions?,
        _ action: @escaping () -> Void
    ) {
        _ = add(due: date, interval: nil, action)
    }

    func schedule(
        after date: SchedulerTimeType,
        interval: SchedulerTimeType.Stride,
        tolerance: SchedulerTimeType.Stride,
        options: SchedulerOptions?,
        _ action: @escaping () -> Void
    ) -> Cancellable {
        precondition(interval > .zero, "VirtualTimeScheduler: a repeating action needs a positive interval")
        let id = add(due: date, interval: interval, action)
        return AnyCancellable { [weak self] in
            guard let self else { return }
            self.lock.withLock { self.pending.removeAll { $0.id == id } }
        }
    }

    /// Moves the clock forward by `stride`, running every action due by then.
    func advance(by stride: SchedulerTimeType.Stride) {
        let target = now.advanced(by: stride)
        while let action = takeNextDue(by: target) {
            action()
        }
        lock.withLock { _now = max(_now, target) }
    }

    private func add(
        due: SchedulerTimeType?, interval: SchedulerTimeType.Stride?, _ action: @escaping () -> Void
    ) -> Int {
        lock.withLock {
            nextID += 1
            nextSequence += 1
            pending.append(Pending(id: nextID, due: due ?? _now, sequence: nextSequence,
                                   interval: interval, action: action))
            return nextID
        }
    }

    /// The earliest action due by `target`, with the clock moved to its time; a repeating action
    /// stays, due again one interval later.
    private func takeNextDue(by target: SchedulerTimeType) -> (() -> Void)? {
        lock.withLock {
            let due = pending.indices.filter { pending[$0].due <= target }
            guard let index = due.min(by: {
                (pending[$0].due, pending[$0].sequence) < (pending[$1].due, pending[$1].sequence)
            }) else { return nil }
            let next = pending[index]
            _now = max(_now, next.due)
            if let interval = next.interval {
                nextSequence += 1
                pending[index].due = next.due.advanced(by: interval)
                pending[index].sequence = nextSequence
            } else {
                pending.remove(at: index)
            }
            return next.action
        }
    }
}

/// A scheduler that runs every action on a thread of its own, so actions really run at the same
/// time (a concurrent dispatch queue may not, on few cores): `schedule(options:)` starts a thread
/// per action; a repeating action gets one thread that runs it every interval until cancelled.
/// Times are `DispatchQueue`'s.
struct ThreadPerActionScheduler: Scheduler, Sendable {
    typealias SchedulerTimeType = DispatchQueue.SchedulerTimeType
    typealias SchedulerOptions = Never

    var now: SchedulerTimeType { DispatchQueue.main.now }
    var minimumTolerance: SchedulerTimeType.Stride { .zero }

    func schedule(options: SchedulerOptions?, _ action: @escaping () -> Void) {
        let action = UncheckedAction(action)
        Thread { action.run() }.start()
    }

    func schedule(
        after date: SchedulerTimeType,
        tolerance: SchedulerTimeType.Stride,
        options: SchedulerOptions?,
        _ action: @escaping () -> Void
    ) {
        let action = UncheckedAction(action)
        let due = date.dispatchTime.uptimeNanoseconds
        Thread {
            Self.sleep(until: due)
            action.run()
        }.start()
    }

    func schedule(
        after date: SchedulerTimeType,
        interval: SchedulerTimeType.Stride,
        tolerance: SchedulerTimeType.Stride,
        options: SchedulerOptions?,
        _ action: @escaping () -> Void
    ) -> Cancellable {
        let action = UncheckedAction(action)
        let cancelled = SharedBox(false)
        let first = date.dispatchTime.uptimeNanoseconds, every = UInt64(max(1, interval.magnitude))
        Thread {
            var due = first
            while !cancelled.value {
                Self.sleep(until: due)
                if cancelled.value { break }
                action.run()
                due += every
            }
        }.start()
        return AnyCancellable { cancelled.value = true }
    }

    /// Until `due` (`DispatchTime` uptime nanoseconds).
    private static func sleep(until due: UInt64) {
        let now = DispatchTime.now().uptimeNanoseconds
        if due > now { usleep(UInt32(min((due - now) / 1_000, 1_000_000))) }
    }
}

/// An action handed to another thread (the scheduler contract: the action may run anywhere).
private final class UncheckedAction: @unchecked Sendable {
    let run: () -> Void
    init(_ run: @escaping () -> Void) { self.run = run }
}

/// How `operator-trap-fixture` ended: traps are watched in a child process, never in the test runner.
struct FixtureResult {
    var reason: Process.TerminationReason
    var status: Int32
    var output: String
}

func runFixture(_ path: String, _ mode: String) throws -> FixtureResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = [mode]
    // The trap is expected: skip the runtime's backtrace (slow, and nothing to debug here).
    process.environment = ProcessInfo.processInfo.environment.merging(["SWIFT_BACKTRACE": "enable=no"]) { $1 }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return FixtureResult(reason: process.terminationReason, status: process.terminationStatus,
                         output: String(decoding: output, as: UTF8.self))
}
