import Foundation

/// The event bus: post events, subscribe with patterns, share sources.
///
/// ## Delivery and threads
/// Posting never takes a lock while calling subscribers. The bus runs one *delivery loop*: a
/// thread that posts while nobody is delivering becomes the loop and delivers — that event and
/// whatever other threads post meanwhile — until the queue is empty; a thread that posts while
/// the loop runs only enqueues. Becoming the loop and taking the sequence number is one
/// compare-and-swap, and the event of such a post goes straight to its subscribers, never
/// through the queue. So:
/// - every subscriber sees events in bus sequence order and never sees concurrent calls;
/// - a post from inside a subscriber (re-entrant) is queued and delivered right after the
///   current event has reached every subscriber, not nested inside it;
/// - a subscriber that takes long delays the loop: subscribers that do real work receive through
///   a ``Mailbox`` (their own serial queue), as handler modules do — see ``scoped(to:)``.
/// `request` and `cancel` from any thread are jobs on the same loop, so demand and buffers need
/// no lock of their own.
///
/// ## Demand and loss
/// A subscription gets no more than it requested. What arrives beyond its demand is buffered up
/// to ``Configuration/subscriptionBufferLimit`` events; past that, the newest are dropped and a
/// ``Gap`` notice takes their place in the stream, with the count and sequence range.
public final class Bus: Sendable {
    public struct Configuration: Sendable {
        /// Events held per subscription beyond its demand before dropping (and announcing) more.
        public var subscriptionBufferLimit: Int = 1024
        /// Distinct event names whose subscriber lists are cached.
        public var routeCacheLimit: Int = 4096

        public init() {}
    }

    @usableFromInline let core: BusCore
    /// Where subscriptions made through this handle are delivered; nil: on the delivery loop.
    public let mailbox: Mailbox?

    public init(configuration: Configuration = Configuration()) {
        self.core = BusCore(configuration: configuration)
        self.mailbox = nil
    }

    init(core: BusCore, mailbox: Mailbox?) {
        self.core = core
        self.mailbox = mailbox
    }

    /// The same bus, but subscriptions made through the returned handle are delivered on
    /// `mailbox`'s serial queue. The host gives each handler module such a handle, so a module's
    /// pipelines never run concurrently and a slow module never holds up the bus.
    public func scoped(to mailbox: Mailbox) -> Bus {
        Bus(core: core, mailbox: mailbox)
    }

    public var configuration: Configuration { core.configuration }

    /// Posts an event to every matching subscription. Assigns the event its sequence number and
    /// returns it (0: the bus has finished and the event went nowhere — or this is a module
    /// worker's bus, which hands the event to the host to number and post, without waiting).
    @discardableResult
    public func post(_ event: consuming Event) -> UInt64 {
        core.post(event)
    }

    /// Posts `events` in order as one batch: they get contiguous sequence numbers, which are
    /// returned (empty: the bus has finished — or this is a module worker's bus, as for
    /// ``post(_:)``). Costs one lock or compare-and-swap for the batch instead of one per event,
    /// and when no delivery is running the events go straight to the subscribers, in one run of
    /// the delivery loop, uncopied; a run of events that reach one subscription goes to it in one
    /// call. A batched event costs about what one delivery does (docs/benchmarks.md); sources that
    /// read many events at once (the journal's posting stage) post this way.
    ///
    /// Every rule of single posts holds for each event of the batch. As the batch's numbers are
    /// taken before its first delivery, a post from inside a subscriber during the batch comes
    /// after the whole batch, and so does a `request` or `cancel` made from another thread (or
    /// through `Subscription.request` inside `receive`) — events for a subscription without
    /// demand meanwhile wait in its buffer as usual; a cancel is still seen at once.
    @discardableResult @inlinable
    public func post<Events: Collection<Event>>(contentsOf events: Events) -> Range<UInt64> {
        // Inlined, so the bus works on contiguous storage, not through a generic collection.
        if let numbers = events.withContiguousStorageIfAvailable({ core.post(contentsOf: $0) }) { return numbers }
        return Array(events).withUnsafeBufferPointer { core.post(contentsOf: $0) }
    }

    /// Posts an event; returns its sequence number (0: the bus has finished). Without a
    /// `source`, a bus scoped to a mailbox posts as the mailbox's label — a module's posts carry
    /// the module's name, so a tail shows who posted — and any other handle as `user`.
    @discardableResult
    public func post(_ name: String, source: String? = nil, fields: [String: FieldValue] = [:]) -> UInt64 {
        core.post(Event(name: name, source: source ?? mailbox?.label ?? "user", fields: fields))
    }

    /// Completes every subscription (after what is buffered for it) and refuses new ones.
    /// Running sources stop as their subscribers go.
    public func finish() {
        core.finish()
    }

    /// Events whose names match `pattern`.
    public func publisher(for pattern: EventPattern) -> EventPublisher {
        EventPublisher(bus: self, patterns: [pattern], source: nil, bufferLimit: configuration.subscriptionBufferLimit)
    }

    /// Events whose names match any of `patterns`: one subscription, each event once.
    public func publisher(for patterns: [EventPattern]) -> EventPublisher {
        EventPublisher(bus: self, patterns: patterns, source: nil, bufferLimit: configuration.subscriptionBufferLimit)
    }

    /// Events whose names match any of `patterns` (NATS syntax, see ``EventPattern``).
    /// Throws ``EventBusError/Code/invalidPattern`` for a malformed pattern.
    public func publisher(for patterns: String...) throws -> EventPublisher {
        EventPublisher(bus: self, patterns: try patterns.map(EventPattern.init),
                       source: nil, bufferLimit: configuration.subscriptionBufferLimit)
    }

    /// Events of a shared source that match `patterns`; the source runs while any such
    /// subscription exists.
    public func publisher(for patterns: [EventPattern], from source: SourceRequest) -> EventPublisher {
        EventPublisher(bus: self, patterns: patterns, source: source, bufferLimit: configuration.subscriptionBufferLimit)
    }

    /// A snapshot of the bus for status displays and tests.
    public struct Statistics: Sendable {
        public var posted: UInt64
        public var subscriptions: Int
        /// Running shared sources and how many subscriptions hold each.
        public var sources: [String: Int]
    }

    public var statistics: Statistics { core.statistics }
}
