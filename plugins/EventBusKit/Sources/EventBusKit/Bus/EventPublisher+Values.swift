import Foundation

extension EventPublisher {
    /// The events as an `AsyncSequence`, for `for await event in bus.publisher(for: …).values`.
    ///
    /// Shadows OpenCombine's `Publisher.values` for bus publishers because that one never cancels
    /// its subscription when the loop is left with `break` (its iterator and the subscription hold
    /// each other), which on a long-lived bus is a leak that keeps receiving. Here the subscription
    /// is cancelled when the iterator goes away or its task is cancelled. Each `next()` requests
    /// one event, so the bus's buffer bound and ``Gap`` notices apply as for any subscriber.
    public var values: AsyncEvents { AsyncEvents(publisher: self) }
}

public struct AsyncEvents: AsyncSequence, Sendable {
    public typealias Element = Event
    let publisher: EventPublisher

    public func makeAsyncIterator() -> Iterator {
        let feed = Feed()
        publisher.subscribe(feed)
        return Iterator(owner: Owner(feed: feed))
    }

    public struct Iterator: AsyncIteratorProtocol {
        fileprivate let owner: Owner

        public mutating func next() async -> Event? {
            let feed = owner.feed
            return await withTaskCancellationHandler {
                await feed.next()
            } onCancel: {
                feed.cancel()
            }
        }
    }

    /// Cancels the subscription when the last copy of the iterator is gone.
    fileprivate final class Owner: Sendable {
        let feed: Feed
        init(feed: Feed) { self.feed = feed }
        deinit { feed.cancel() }
    }

    fileprivate final class Feed: Subscriber, @unchecked Sendable {
        typealias Input = Event
        typealias Failure = Never

        private let lock = NSLock()
        private var subscription: Subscription?
        private var waiting: CheckedContinuation<Event?, Never>?
        private var done = false

        func receive(subscription: Subscription) {
            lock.lock()
            self.subscription = subscription
            lock.unlock()
        }

        func receive(_ input: Event) -> Subscribers.Demand {
            lock.lock()
            let continuation = waiting
            waiting = nil
            lock.unlock()
            continuation?.resume(returning: input)
            return .none
        }

        func receive(completion: Subscribers.Completion<Never>) {
            finish(cancelling: false)
        }

        func next() async -> Event? {
            await withCheckedContinuation { (continuation: CheckedContinuation<Event?, Never>) in
                lock.lock()
                let subscription = done ? nil : self.subscription
                if subscription != nil { waiting = continuation }
                lock.unlock()
                if let subscription {
                    subscription.request(.max(1))
                } else {
                    continuation.resume(returning: nil)
                }
            }
        }

        func cancel() {
            finish(cancelling: true)
        }

        private func finish(cancelling: Bool) {
            lock.lock()
            done = true
            let subscription = self.subscription
            self.subscription = nil
            let continuation = waiting
            waiting = nil
            lock.unlock()
            if cancelling { subscription?.cancel() }
            continuation?.resume(returning: nil)
        }
    }
}
