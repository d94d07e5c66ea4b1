/// A bus subscription with `filter`, `map`, `compactMap` and `removeDuplicates` applied on the
/// subscription's own lane: what `bus.publisher(for:).filter { … }` returns.
///
/// Why it exists: these four operators are most of what module code writes, and through
/// OpenCombine's generic `Publishers.Filter`/`Map` each value pays its operator's lock, witness
/// tables and an extra subscription hop (~80 ns per delivery, docs/platform-facts.md, Delivery costs). Here the stages are
/// plain closures composed once per subscription and called by the bus subscription itself, right
/// before it hands the value to the subscriber — on the bus's delivery loop, or on the
/// subscription's ``Mailbox`` queue when the bus handle is scoped to one. The stages therefore
/// never run concurrently, like the subscriber.
///
/// Semantics are Combine's for the same operator chain on a bus publisher:
/// - Demand counts *outputs*: an event a stage drops spends no demand (Combine's `Filter` asks
///   upstream for one more in that case). Events beyond the demand wait in the bus subscription's
///   buffer before the stages run — as they would wait in the bus publisher before Combine's
///   operators — so the stages see each event once, when it can go out.
/// - `removeDuplicates` keeps its previous value per subscription (each subscriber builds its own
///   stage chain), compares each value with the previous one *it received* — the one before it
///   from the stage before it, whether that one passed or not — and the first value always
///   passes. That is Combine's rule (OpenCombine's `RemoveDuplicates` keeps the last input), so
///   a chain gives the same values whether it runs here or after `eraseToAnyPublisher()`; it
///   differs from "the last that passed" only for a predicate that is not transitive.
/// - `request(.none)` traps, as it does on the bus publisher itself and through the same chain of
///   OpenCombine's operators: demand must be greater than zero.
/// - Cancellation and completion are the bus subscription's: `cancel()` stops the stages with
///   the subscriber; the bus finishing completes after what is buffered.
/// Chaining more of these four keeps the fast path; any other operator takes the result as an
/// ordinary Combine publisher.
///
/// The return types differ from Combine's (`EventPipeline<T>` instead of `Publishers.Filter<…>`),
/// which only matters to code that names the operator types; `eraseToAnyPublisher()` hides both.
public struct EventPipeline<Output>: Publisher {
    public typealias Failure = Never

    /// One subscription's stage chain: called with each event and the next step, which it calls
    /// with the event's output — or not at all when a stage drops it. Passing the value on to a
    /// continuation (rather than returning an `Output?`) lets every stage borrow it: no copy of
    /// the event, no retain of its strings and fields per stage.
    typealias Stage = (Event, (Output) -> Void) -> Void

    let source: EventPublisher
    /// Builds one subscription's stage chain. Called once per subscriber, so stateful stages
    /// (`removeDuplicates`) keep their state per subscription.
    let makeStage: () -> Stage

    init(source: EventPublisher, makeStage: @escaping () -> Stage) {
        self.source = source
        self.makeStage = makeStage
    }

    public func receive<S: Subscriber>(subscriber: S) where S.Input == Output, S.Failure == Never {
        source.bus.core.subscribe(subscriber, to: source, through: makeStage())
    }

    /// Like Combine's `sink`, on the bus's closure-subscription fast path (see
    /// ``EventPublisher/sink(receiveCompletion:receiveValue:)``), the stages run first.
    public func sink(
        receiveCompletion: @escaping (Subscribers.Completion<Never>) -> Void = { _ in },
        receiveValue: @escaping (Output) -> Void
    ) -> AnyCancellable {
        let stage = makeStage()
        return source.bus.core.sink(source, receiveCompletion: receiveCompletion) { event in
            stage(event, receiveValue)
        }
    }

    // MARK: Stages

    /// Combine's `filter`, run on the bus subscription's lane.
    public func filter(_ isIncluded: @escaping (Output) -> Bool) -> EventPipeline<Output> {
        chained { upstream in { event, next in
            upstream(event) { value in if isIncluded(value) { next(value) } }
        } }
    }

    /// Combine's `map`, run on the bus subscription's lane.
    public func map<T>(_ transform: @escaping (Output) -> T) -> EventPipeline<T> {
        chained { upstream in { event, next in
            upstream(event) { value in next(transform(value)) }
        } }
    }

    /// Combine's `compactMap`, run on the bus subscription's lane: a nil result spends no demand.
    public func compactMap<T>(_ transform: @escaping (Output) -> T?) -> EventPipeline<T> {
        chained { upstream in { event, next in
            upstream(event) { value in if let result = transform(value) { next(result) } }
        } }
    }

    /// Combine's `removeDuplicates(by:)`: drops a value `predicate` finds equal to the previous
    /// one received (passed or not); the previous value is kept per subscription.
    public func removeDuplicates(
        by predicate: @escaping (Output, Output) -> Bool
    ) -> EventPipeline<Output> {
        chained { upstream in
            var previous: Output?
            return { event, next in
                upstream(event) { value in
                    let last = previous
                    previous = value
                    if let last, predicate(last, value) { return }
                    next(value)
                }
            }
        }
    }

    private func chained<T>(
        _ next: @escaping (@escaping Stage) -> EventPipeline<T>.Stage
    ) -> EventPipeline<T> {
        let upstream = makeStage
        return EventPipeline<T>(source: source) { next(upstream()) }
    }
}

extension EventPipeline where Output: Equatable {
    /// Combine's `removeDuplicates()`: drops a value equal to the previous one.
    public func removeDuplicates() -> EventPipeline<Output> {
        removeDuplicates(by: ==)
    }
}

extension EventPublisher {
    /// Combine's `filter`, run by the bus subscription itself (see ``EventPipeline``).
    public func filter(_ isIncluded: @escaping (Event) -> Bool) -> EventPipeline<Event> {
        EventPipeline(source: self) { { event, next in if isIncluded(event) { next(event) } } }
    }

    /// Combine's `map`, run by the bus subscription itself (see ``EventPipeline``).
    public func map<T>(_ transform: @escaping (Event) -> T) -> EventPipeline<T> {
        EventPipeline(source: self) { { event, next in next(transform(event)) } }
    }

    /// Combine's `compactMap`, run by the bus subscription itself (see ``EventPipeline``).
    public func compactMap<T>(_ transform: @escaping (Event) -> T?) -> EventPipeline<T> {
        EventPipeline(source: self) { { event, next in if let value = transform(event) { next(value) } } }
    }

    /// Combine's `removeDuplicates(by:)`, run by the bus subscription itself (see
    /// ``EventPipeline``). Events are not `Equatable` (two posts of the same content are two
    /// events), so there is no `removeDuplicates()` without a predicate on the events themselves.
    public func removeDuplicates(by predicate: @escaping (Event, Event) -> Bool) -> EventPipeline<Event> {
        EventPipeline(source: self) { { event, next in next(event) } }.removeDuplicates(by: predicate)
    }
}

/// The Combine face of a pipeline subscription: runs the stage chain, then the subscriber.
/// Everything runs on the subscription's lane (see ``SubscriptionCore``).
final class PipelineSubscription<Downstream: Subscriber>: SubscriptionCore, Subscription, @unchecked Sendable
where Downstream.Failure == Never {
    private let core: BusCore
    private let stage: EventPipeline<Downstream.Input>.Stage
    private var downstream: Downstream?

    init(core: BusCore, downstream: Downstream, stage: @escaping EventPipeline<Downstream.Input>.Stage,
         id: UInt64, publisher: EventPublisher, lease: SourceLease?) {
        self.core = core
        self.stage = stage
        self.downstream = downstream
        super.init(id: id, publisher: publisher, lease: lease)
    }

    override func receive(_ event: Event) -> Int {
        guard let downstream else { return 0 }
        var demand = SubscriptionCore.skipped  // stays so when a stage drops the event
        stage(event) { value in demand = downstream.receive(value).max ?? Int.max }
        return demand
    }

    override func receiveFinished() {
        guard let downstream else { return }
        self.downstream = nil
        downstream.receive(completion: .finished)
    }

    override func dropSubscriber() {
        downstream = nil
    }

    func request(_ demand: Subscribers.Demand) {
        core.request(self, SubscriptionCore.requested(demand, by: Downstream.self))
    }

    func cancel() {
        core.cancel(self)
    }

    var combineIdentifier: CombineIdentifier { CombineIdentifier(self) }
}

extension BusCore {
    /// Subscribes `downstream` to `publisher` through a pipeline's stage chain.
    func subscribe<Downstream: Subscriber>(
        _ downstream: Downstream, to publisher: EventPublisher,
        through stage: @escaping EventPipeline<Downstream.Input>.Stage
    ) where Downstream.Failure == Never {
        let added = register(publisher, make: { id, lease in
            PipelineSubscription(core: self, downstream: downstream, stage: stage, id: id,
                                 publisher: publisher, lease: lease)
        }, beforeSourceStarts: { downstream.receive(subscription: $0) })
        guard added != nil else {
            downstream.receive(subscription: Subscriptions.empty)
            downstream.receive(completion: .finished)
            return
        }
    }
}
