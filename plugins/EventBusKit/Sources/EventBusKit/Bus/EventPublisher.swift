/// A subscription to the bus, as a Combine publisher. Hot and shared: every subscriber gets the
/// events posted while it is subscribed (no replay), each honouring its own demand.
public struct EventPublisher: Publisher, Sendable {
    public typealias Output = Event
    public typealias Failure = Never

    let bus: Bus
    let patterns: [EventPattern]
    let source: SourceRequest?
    let bufferLimit: Int

    /// The same subscription with another per-subscriber buffer bound (at least 1).
    public func bufferLimit(_ limit: Int) -> EventPublisher {
        EventPublisher(bus: bus, patterns: patterns, source: source, bufferLimit: Swift.max(1, limit))
    }

    public func receive<S: Subscriber>(subscriber: S) where S.Input == Event, S.Failure == Never {
        bus.core.subscribe(subscriber, to: self)
    }
}

extension EventPublisher {
    /// Like Combine's `sink`, without the lock and generic dispatch a general-purpose `Sink` pays
    /// per value: the bus already calls each subscription serially.
    public func sink(
        receiveCompletion: @escaping (Subscribers.Completion<Never>) -> Void = { _ in },
        receiveValue: @escaping (Event) -> Void
    ) -> AnyCancellable {
        bus.core.sink(self, receiveCompletion: receiveCompletion, receiveValue: receiveValue)
    }
}
