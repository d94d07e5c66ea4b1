import Synchronization

/// A producer of events that the bus starts and stops on demand: timers, file watches, journal
/// readers. Implementations post what they see with ``Bus/post(_:)``, using their ``id`` as the
/// event's `source`, which is how subscribers of a shared source get its events only.
public protocol EventSource: AnyObject, Sendable {
    /// Called once, when the first subscriber arrives. Must not block; must not post before
    /// returning from a thread that holds locks of its own.
    func start(posting bus: Bus)
    /// Called once, when the last subscriber cancelled. After it returns, nothing more is posted.
    func stop()
    /// Called when another subscriber joins the source, once its subscription is in place (the
    /// first one gets ``start(posting:)`` instead). A source whose subscribers need the current
    /// state before the changes (the units source's snapshot) posts it again here — to every
    /// subscriber of the source, as all its events go. Must not block. The default does nothing.
    func subscriberJoined()
}

extension EventSource {
    public func subscriberJoined() {}
}

/// What a subscription asks the bus to run: an id that identifies the source *and its
/// options* (two subscribers asking for the same id share one source), and how to make it.
public struct SourceRequest: Sendable {
    public let id: String
    /// The options the source was asked for with, when it is of a registered kind (timers,
    /// files, journal): what a module worker forwards so the host opens the same source.
    public let options: (any SourceOptions)?
    public let make: @Sendable () -> any EventSource

    public init(id: String, options: (any SourceOptions)? = nil, make: @escaping @Sendable () -> any EventSource) {
        self.id = id
        self.options = options
        self.make = make
    }
}

/// Reference-counted shared sources, like `share()` in Combine: the first lease starts the
/// source, the last release stops it. A source that stops and is asked for again is made anew.
final class SharedSources: Sendable {
    private struct Entry {
        let source: any EventSource
        var leases: Int
        /// Whether ``start(_:id:posting:)`` started it: one never started is never stopped.
        var started = false
    }

    private let entries = Locked<[String: Entry]>([:])

    /// Takes a lease on the source, making it if nobody holds one. The caller starts the returned
    /// source (``start(_:id:posting:)``) only when `isFirst` — after it has registered its
    /// subscription and that subscription's first demand, so the first events are not lost.
    func acquire(_ request: SourceRequest) -> (lease: SourceLease, source: any EventSource, isFirst: Bool) {
        let (source, isFirst) = entries.withLock { entries -> (any EventSource, Bool) in
            if var entry = entries[request.id] {
                entry.leases += 1
                entries[request.id] = entry
                return (entry.source, false)
            }
            let source = request.make()
            entries[request.id] = Entry(source: source, leases: 1)
            return (source, true)
        }
        return (SourceLease(id: request.id, owner: self), source, isFirst)
    }

    fileprivate func release(_ id: String) {
        let stopping: (any EventSource)? = entries.withLock { entries in
            guard var entry = entries[id] else { return nil }
            entry.leases -= 1
            if entry.leases > 0 {
                entries[id] = entry
                return nil
            }
            entries[id] = nil
            return entry.started ? entry.source : nil
        }
        stopping?.stop()
    }

    /// Starts `source` unless every lease on it was released before (a first subscriber that
    /// cancelled as soon as it got its subscription): then it is dropped without ever running.
    func start(_ source: any EventSource, id: String, posting bus: Bus) {
        let held = entries.withLock { entries -> Bool in
            guard var entry = entries[id], entry.source === source else { return false }
            entry.started = true
            entries[id] = entry
            return true
        }
        if held { source.start(posting: bus) }
    }

    /// Running sources and how many subscriptions hold each.
    var snapshot: [String: Int] {
        entries.withLock { $0.mapValues(\.leases) }
    }
}

/// One subscription's hold on a shared source; released exactly once.
final class SourceLease: Sendable {
    let id: String
    private let owner: SharedSources
    private let released = Atomic<Bool>(false)

    init(id: String, owner: SharedSources) {
        self.id = id
        self.owner = owner
    }

    func release() {
        guard !released.exchange(true, ordering: .acquiringAndReleasing) else { return }
        owner.release(id)
    }

    deinit { release() }
}
