/// Where a bus in a module worker process sends what module code does with it.
///
/// Why in the SDK: a process-isolated module runs in a worker process, but must see the same
/// ``Bus`` API as in the host (the SDK is the one boundary between module code and the host). The worker's bus is made
/// with ``Bus/init(remote:)``: routing, demand, buffers and the module's mailbox stay local, while
/// every subscription is *also* announced here — with its patterns and, for a shared source, the
/// source's options — so the host subscribes on its own bus on the module's behalf and its events
/// come back through ``Bus/deliverRemote(_:)``. Posts and journal acknowledgements go to the host
/// too: sequence numbers, sources and consumer positions belong to the host alone.
///
/// SPI for the isolation worker, not module API.
///
/// Threads: ``subscribe(_:patterns:source:)`` and ``cancel(_:)`` are called on the thread that
/// subscribes or cancels (the module's queue, usually); ``post(_:)`` and ``acknowledge(source:cursor:sequence:)``
/// on the posting thread. Implementations must not call back into the bus synchronously.
@_spi(EventBusHost) public protocol BusRemote: AnyObject, Sendable {
    /// A subscription with id `id` was made; `source` is set for a shared source's events.
    func subscribe(_ id: UInt64, patterns: [EventPattern], source: SourceRequest?)
    /// Subscription `id` was cancelled (or the bus finished).
    func cancel(_ id: UInt64)
    /// Module code posted `event`.
    func post(_ event: Event)
    /// Module code acknowledged a journal entry of the source `source`; returns once the host has
    /// persisted it, or throws its error.
    func acknowledge(source: String, cursor: String, sequence: UInt64) throws
}

@_spi(EventBusHost) extension Bus {
    /// A bus whose subscriptions, posts and acknowledgements go to `remote` (see ``BusRemote``).
    /// Shared sources are never started here: the host runs them.
    public convenience init(remote: any BusRemote, configuration: Configuration = Configuration()) {
        self.init(core: BusCore(configuration: configuration, remote: remote), mailbox: nil)
    }

    /// Delivers events the host routed to this process, each to the one subscription it was
    /// meant for (by the id ``BusRemote/subscribe(_:patterns:source:)`` was told), keeping the
    /// host's sequence numbers. A subscription cancelled meanwhile gets nothing. One lock for the
    /// whole batch; delivery runs on this bus's delivery loop, in order.
    public func deliverRemote(_ batch: [(subscription: UInt64, event: Event)]) {
        core.deliverRemote(batch)
    }
}

@_spi(EventBusHost) extension Event {
    /// The event with the sequence number the host's bus gave it (decoding a forwarded event).
    public func withSequence(_ sequence: UInt64) -> Event {
        var copy = self
        copy.sequence = sequence
        return copy
    }
}
