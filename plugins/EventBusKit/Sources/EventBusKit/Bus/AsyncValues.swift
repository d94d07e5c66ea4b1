import Foundation

/// A publisher whose `values` is ``AsyncValues``: `for await … in publisher.values` cancels the
/// subscription when the loop is left — by `break`, `return` or a thrown error — or its task is
/// cancelled.
///
/// Why it exists: OpenCombine's `Publisher.values` (its `AsyncPublisher`) cancels only when the
/// task is cancelled. Left with `break`, its iterator and the subscription hold each other and
/// nothing cancels, so on a long-lived bus the subscription stays, keeps its buffer and keeps
/// receiving. Conforming a publisher type to this protocol makes `values` on it resolve to the
/// SDK's (an extension of a refining protocol wins over `Publisher`'s), with the same results.
///
/// The bus's publishers, the SDK's operators, `AnyPublisher` and OpenCombine's operators conform
/// (<doc:OperatorSemantics>), so a chain that starts at a bus publisher gets it whatever
/// operators it goes through. Where it does not:
/// - a publisher type not on the list — your own, or one OpenCombine adds later: conform it
///   (`extension MyPublisher: AsyncValuesPublisher {}`) or write `AsyncValues(publisher)`;
/// - generic code that knows only `P: Publisher`: there `values` is OpenCombine's. Constrain to
///   `P: AsyncValuesPublisher`, or use `AsyncValues(publisher)`.
public protocol AsyncValuesPublisher: Publisher {}

extension AsyncValuesPublisher where Failure == Never {
    /// The values as an `AsyncSequence`, for `for await value in publisher.values`: see
    /// ``AsyncValues``.
    public var values: AsyncValues<Self> { AsyncValues(self) }
}

/// A bus subscription's events as an `AsyncSequence`: what `bus.publisher(for:).values` is.
public typealias AsyncEvents = AsyncValues<EventPublisher>

/// A publisher's values as an `AsyncSequence` whose subscription ends with the loop.
///
/// Each `next()` requests one value, so a bus publisher's buffer bound and ``Gap`` notices apply
/// as for any subscriber. The subscription is cancelled when the last copy of the iterator goes
/// away (the loop was left) or the task is cancelled while it waits; `next()` then returns nil.
/// The publisher finishing ends the sequence too. Values are handed over on whichever thread the
/// publisher delivers on (a bus's delivery loop, a module's queue); the loop runs on its task.
public struct AsyncValues<Upstream: Publisher>: AsyncSequence where Upstream.Failure == Never {
    public typealias Element = Upstream.Output
    public typealias Failure = Never
    let upstream: Upstream

    /// `upstream`'s values; what `values` is on an ``AsyncValuesPublisher``.
    public init(_ upstream: Upstream) {
        self.upstream = upstream
    }

    public func makeAsyncIterator() -> Iterator {
        let feed = Feed<Upstream.Output>()
        upstream.subscribe(feed)
        return Iterator(owner: Owner(feed: feed))
    }

    public struct Iterator: AsyncIteratorProtocol {
        fileprivate let owner: Owner<Upstream.Output>

        public mutating func next() async -> Upstream.Output? {
            let feed = owner.feed
            return await withTaskCancellationHandler {
                await feed.next()
            } onCancel: {
                feed.cancel()
            }
        }
    }
}

extension AsyncValues: Sendable where Upstream: Sendable {}

/// Cancels the subscription when the last copy of the iterator is gone. The subscription holds
/// the feed (as its subscriber) and the feed holds the subscription, so the feed's own lifetime
/// cannot tell: the iterator holds this instead, and nothing else does.
private final class Owner<Input>: Sendable {
    let feed: Feed<Input>
    init(feed: Feed<Input>) { self.feed = feed }
    deinit { feed.cancel() }
}

/// The subscriber behind ``AsyncValues``: one value requested per waiting `next()`.
///
/// `@unchecked Sendable`: its state is touched only under `lock`; continuations are resumed
/// outside it. A subscription can arrive after the first `next()` (`subscribe(on:)` delivers it
/// on a scheduler): the waiting `next()`s are requested then. One that arrives after the feed was
/// cancelled is cancelled at once.
private final class Feed<Input>: Subscriber, @unchecked Sendable {
    typealias Failure = Never

    private enum State {
        case awaitingSubscription
        case subscribed(Subscription)
        case finished
    }

    private let lock = NSLock()
    private var state = State.awaitingSubscription
    /// The `next()` calls waiting for a value, oldest first; each has requested one.
    private var waiting: [UnsafeContinuation<Handed?, Never>] = []

    /// A value handed from the publisher's thread to the loop's task, as Combine's `values` hands
    /// it: a non-Sendable value that an operator keeps too (`removeDuplicates` keeps its last) is
    /// shared as it is with any subscriber.
    private struct Handed: @unchecked Sendable {
        let value: Input
    }

    func receive(subscription: Subscription) {
        lock.lock()
        guard case .awaitingSubscription = state else {
            lock.unlock()
            subscription.cancel()
            return
        }
        state = .subscribed(subscription)
        let owed = waiting.count
        lock.unlock()
        if owed > 0 { subscription.request(.max(owed)) }
    }

    func receive(_ input: Input) -> Subscribers.Demand {
        lock.lock()
        // Nobody waiting: a value beyond demand, or one that crossed a cancel. Dropped.
        let continuation = waiting.isEmpty ? nil : waiting.removeFirst()
        lock.unlock()
        continuation?.resume(returning: Handed(value: input))
        return .none
    }

    func receive(completion: Subscribers.Completion<Never>) {
        finish(cancelling: false)
    }

    func next() async -> Input? {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Handed?, Never>) in
            lock.lock()
            switch state {
            case .finished:
                lock.unlock()
                continuation.resume(returning: nil)
            case .awaitingSubscription:
                waiting.append(continuation)  // requested when the subscription arrives
                lock.unlock()
            case .subscribed(let subscription):
                waiting.append(continuation)
                lock.unlock()
                subscription.request(.max(1))
            }
        }?.value
    }

    func cancel() {
        finish(cancelling: true)
    }

    private func finish(cancelling: Bool) {
        lock.lock()
        var subscription: Subscription?
        if case .subscribed(let current) = state { subscription = current }
        state = .finished
        let continuations = waiting
        waiting = []
        lock.unlock()
        if cancelling { subscription?.cancel() }
        for continuation in continuations { continuation.resume(returning: nil) }
    }
}

// MARK: The publishers whose `values` is the SDK's

// The bus and the SDK's operators.
extension EventPublisher: AsyncValuesPublisher {}
extension EventPipeline: AsyncValuesPublisher {}
extension Publishers.Merge: AsyncValuesPublisher {}
extension Publishers.Merge3: AsyncValuesPublisher {}
extension Publishers.Merge4: AsyncValuesPublisher {}
extension Publishers.Merge5: AsyncValuesPublisher {}
extension Publishers.Merge6: AsyncValuesPublisher {}
extension Publishers.Merge7: AsyncValuesPublisher {}
extension Publishers.Merge8: AsyncValuesPublisher {}
extension Publishers.MergeMany: AsyncValuesPublisher {}
extension Publishers.CombineLatest: AsyncValuesPublisher {}
extension Publishers.CombineLatest3: AsyncValuesPublisher {}
extension Publishers.CombineLatest4: AsyncValuesPublisher {}
extension Publishers.CollectByTime: AsyncValuesPublisher {}
extension Publishers.Settle: AsyncValuesPublisher {}

// OpenCombine 0.14's operators (and type erasure) that a chain from a bus publisher can go
// through and still fail with `Never`.
extension AnyPublisher: AsyncValuesPublisher {}
extension Publishers.AssertNoFailure: AsyncValuesPublisher {}
extension Publishers.Autoconnect: AsyncValuesPublisher {}
extension Publishers.Breakpoint: AsyncValuesPublisher {}
extension Publishers.Buffer: AsyncValuesPublisher {}
extension Publishers.Catch: AsyncValuesPublisher {}
extension Publishers.Collect: AsyncValuesPublisher {}
extension Publishers.CollectByCount: AsyncValuesPublisher {}
extension Publishers.CompactMap: AsyncValuesPublisher {}
extension Publishers.Concatenate: AsyncValuesPublisher {}
extension Publishers.Debounce: AsyncValuesPublisher {}
extension Publishers.Delay: AsyncValuesPublisher {}
extension Publishers.Drop: AsyncValuesPublisher {}
extension Publishers.DropUntilOutput: AsyncValuesPublisher {}
extension Publishers.DropWhile: AsyncValuesPublisher {}
extension Publishers.Filter: AsyncValuesPublisher {}
extension Publishers.First: AsyncValuesPublisher {}
extension Publishers.FirstWhere: AsyncValuesPublisher {}
extension Publishers.FlatMap: AsyncValuesPublisher {}
extension Publishers.HandleEvents: AsyncValuesPublisher {}
extension Publishers.Last: AsyncValuesPublisher {}
extension Publishers.LastWhere: AsyncValuesPublisher {}
extension Publishers.MakeConnectable: AsyncValuesPublisher {}
extension Publishers.Map: AsyncValuesPublisher {}
extension Publishers.MapKeyPath: AsyncValuesPublisher {}
extension Publishers.MapKeyPath2: AsyncValuesPublisher {}
extension Publishers.MapKeyPath3: AsyncValuesPublisher {}
extension Publishers.MeasureInterval: AsyncValuesPublisher {}
extension Publishers.Multicast: AsyncValuesPublisher {}
extension Publishers.Output: AsyncValuesPublisher {}
extension Publishers.PrefixUntilOutput: AsyncValuesPublisher {}
extension Publishers.PrefixWhile: AsyncValuesPublisher {}
extension Publishers.Print: AsyncValuesPublisher {}
extension Publishers.ReceiveOn: AsyncValuesPublisher {}
extension Publishers.Reduce: AsyncValuesPublisher {}
extension Publishers.RemoveDuplicates: AsyncValuesPublisher {}
extension Publishers.ReplaceEmpty: AsyncValuesPublisher {}
extension Publishers.ReplaceError: AsyncValuesPublisher {}
extension Publishers.Scan: AsyncValuesPublisher {}
extension Publishers.Share: AsyncValuesPublisher {}
extension Publishers.SubscribeOn: AsyncValuesPublisher {}
extension Publishers.SwitchToLatest: AsyncValuesPublisher {}
extension Publishers.Throttle: AsyncValuesPublisher {}
extension Publishers.Timeout: AsyncValuesPublisher {}
extension Publishers.Zip: AsyncValuesPublisher {}
extension Publishers.Zip3: AsyncValuesPublisher {}
extension Publishers.Zip4: AsyncValuesPublisher {}
