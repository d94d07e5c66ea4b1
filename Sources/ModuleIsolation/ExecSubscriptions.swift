@_spi(EventBusHost) import EventBusKit
import Synchronization

/// The ids an exec module's subscriptions carry and the field matches each applies, kept by its
/// supervisor across its program's restarts: the host's subscriptions outlive a crashed program
/// (``ModuleForwarding``), and their events keep the ids they had until the restarted program
/// makes them again — so ids are never reused, and the old ones still find their matches.
final class ExecSubscriptions: Sendable {
    private struct State {
        var next: UInt64 = 1
        var filters: [UInt64: @Sendable (Event) -> Bool] = [:]
    }

    private let state = Mutex(State())

    /// A new id; its events pass only when `filter` (if any) accepts them.
    func register(_ filter: (@Sendable (Event) -> Bool)?) -> UInt64 {
        state.withLock { state in
            defer { state.next += 1 }
            if let filter { state.filters[state.next] = filter }
            return state.next
        }
    }

    /// The filters by id, as they are now (read once per batch of lines).
    var filters: [UInt64: @Sendable (Event) -> Bool] { state.withLock { $0.filters } }
}
