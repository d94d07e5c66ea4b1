import OpenCombine

// Apple Combine's `collect(_:options:)` — `Publishers.TimeGroupingStrategy` and
// `Publishers.CollectByTime` — which OpenCombine 0.14.0 lacks (its issue #1). Same type names,
// cases, generic parameters, properties and initializer as Combine, so module code written against
// Combine compiles unchanged: `events.collect(.byTime(context.queue, .seconds(1)))`. All the
// behaviour — and where it deliberately goes beyond Apple's — is documented on
// `CollectByTimeInner`.

extension Publishers {
    /// A strategy for collecting received elements.
    public enum TimeGroupingStrategy<Context: Scheduler> {
        /// A grouping that collects and periodically publishes items: every `stride` of the
        /// scheduler's clock, the items received since the last publication, as one array.
        case byTime(Context, Context.SchedulerTimeType.Stride)

        /// A grouping that collects and publishes items periodically or when a buffer reaches a
        /// maximum size (the `Int`; a count below 1 is taken as 1).
        case byTimeOrCount(Context, Context.SchedulerTimeType.Stride, Int)
    }

    /// A publisher that buffers and periodically publishes its items.
    ///
    /// Arrays are never empty: a period in which nothing arrived publishes nothing. Values and the
    /// completion reach the subscriber on the strategy's scheduler (in a module: its queue). See
    /// `CollectByTimeInner` for demand, and for what happens to items collected without demand.
    public struct CollectByTime<Upstream: Publisher, Context: Scheduler>: Publisher {
        public typealias Output = [Upstream.Output]
        public typealias Failure = Upstream.Failure

        /// The publisher that this publisher receives elements from.
        public let upstream: Upstream

        /// The strategy with which to collect and publish elements.
        public let strategy: Publishers.TimeGroupingStrategy<Context>

        /// Scheduler options to use for the strategy.
        public let options: Context.SchedulerOptions?

        public init(
            upstream: Upstream,
            strategy: Publishers.TimeGroupingStrategy<Context>,
            options: Context.SchedulerOptions?
        ) {
            self.upstream = upstream
            self.strategy = strategy
            self.options = options
        }

        public func receive<S: Subscriber>(subscriber: S)
        where S.Failure == Failure, S.Input == Output {
            upstream.subscribe(
                CollectByTimeInner<Upstream.Output, Context, S>(
                    downstream: subscriber, strategy: strategy, options: options))
        }
    }
}

extension Publisher {
    /// Collects elements by a given time-grouping strategy, and emits a single array of the
    /// collection.
    ///
    /// At the end of each interval of the strategy's scheduler, the publisher sends an array of
    /// the items it collected during it (nothing, if it collected none). With `.byTimeOrCount`, an
    /// array also goes out as soon as it holds `count` items. If the upstream finishes, what was
    /// collected goes out before the finish; if it fails, the failure is forwarded instead of the
    /// collected items.
    ///
    /// Note: with `.byTimeOrCount`, a request for `.max(n)` arrays requests `.max(count * n)`
    /// items from the upstream publisher; with `.byTime`, the upstream is asked for one item at a
    /// time, as many as it sends.
    ///
    /// - Parameters:
    ///   - strategy: The strategy with which to collect and publish elements.
    ///   - options: `Scheduler` options to use for the strategy.
    /// - Returns: A publisher that collects elements by a given strategy, and emits a single array
    ///   of the collection.
    public func collect<S: Scheduler>(
        _ strategy: Publishers.TimeGroupingStrategy<S>,
        options: S.SchedulerOptions? = nil
    ) -> Publishers.CollectByTime<Self, S> {
        Publishers.CollectByTime(upstream: self, strategy: strategy, options: options)
    }
}
