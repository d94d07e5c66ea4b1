import CNATS
@_spi(EventBusHost) import EventBusKit

/// Durable mode: the exports handed to nats.c that the stream has not acknowledged yet, in the
/// order they were first published, and which nats.c message is each one's current attempt.
///
/// Why the exporter keeps them itself rather than re-publishing one whose acknowledgement failed:
/// a re-publish after a timeout (5 s) lands in the stream behind every later export, so the
/// stream — and every host reading it — had an origin's events out of order after each server
/// death. Instead, whenever the connection broke or an acknowledgement failed, the exporter takes
/// back every attempt from nats.c (`js_PublishAsyncGetPendingList`: their late acknowledgements no
/// longer count) and publishes all outstanding exports again, oldest first, before any new one.
/// What the stream had stored comes back as a duplicate (same message id) and is dropped by the
/// server; the first one it had not stored is stored next, so an origin's events are stored in
/// its order.
///
/// Attempts are known by their nats.c message's address: an acknowledgement for an address no
/// longer listed belongs to an attempt taken back (its late answer) and is ignored. An address is
/// not reused while listed: nats.c frees the message only after the acknowledgement handler
/// returned, and one taken back is freed after ``restart()`` forgot every address.
///
/// Threads: the exporter thread adds, re-publishes and gives up; nats.c's acknowledgement thread
/// settles; status reads the count. One lock.
final class OutstandingPublishes: @unchecked Sendable {
    // @unchecked: everything is behind `state`'s lock.
    struct Export: Sendable {
        /// Export order: assigned by the exporter, increasing.
        let index: UInt64
        let subject: String
        let payload: [UInt8]
        /// The event's bus sequence: its JetStream message id, the same in every attempt, is
        /// `<host>:<instance>:<sequence>` (``Exporter``'s `MessageID`).
        let sequence: UInt64
    }

    private struct State {
        var exports: [UInt64: Export] = [:]
        /// nats.c message address → export index.
        var attempts: [UInt: UInt64] = [:]
    }

    /// A pthread mutex (`Locked`), not `Synchronization.Mutex`: the thread sanitizer cannot see
    /// the latter's futex and reported its locked sections as racing.
    private let state = Locked(State())

    var count: Int { state.withLock { $0.exports.count } }

    /// Lists `export` (if new) with `attempt` as its current attempt; before the attempt is
    /// published, since its acknowledgement may come before the publish call returns.
    func attach(_ export: Export, attempt: OpaquePointer) {
        state.withLock { state in
            state.exports[export.index] = export
            state.attempts[UInt(bitPattern: attempt)] = export.index
        }
    }

    /// The attempt was not published (nats.c refused it and it is ours again); `forgetExport`: the
    /// export was new and is not outstanding either.
    func detach(_ attempt: OpaquePointer, forgetExport: Bool) {
        state.withLock { state in
            guard let index = state.attempts.removeValue(forKey: UInt(bitPattern: attempt)) else { return }
            if forgetExport { state.exports[index] = nil }
        }
    }

    /// nats.c's acknowledgement thread. `stored`: the stream acknowledged the attempt — the
    /// export is no longer outstanding and is returned. Not stored: the attempt is forgotten and
    /// the export stays, to be published again with the rest. Returns the attempt's export, or
    /// nil for an attempt taken back (its answer no longer counts).
    func settle(_ attempt: OpaquePointer, stored: Bool) -> Export? {
        state.withLock { state in
            guard let index = state.attempts.removeValue(forKey: UInt(bitPattern: attempt)),
                  let export = state.exports[index] else { return nil }
            if stored { state.exports[index] = nil }
            return export
        }
    }

    /// Whether the stream has not answered `index`'s current attempt yet.
    func isAwaitingAnswer(_ index: UInt64) -> Bool {
        state.withLock { $0.attempts.values.contains(index) }
    }

    /// Whether `index` is still outstanding (not stored, not given up).
    func isOutstanding(_ index: UInt64) -> Bool {
        state.withLock { $0.exports[index] != nil }
    }

    /// The export is given up for good (a refusal that will not change): no longer outstanding.
    func giveUp(_ index: UInt64) -> Export? {
        state.withLock { state in
            state.attempts = state.attempts.filter { $0.value != index }
            return state.exports.removeValue(forKey: index)
        }
    }

    /// Forgets every attempt (they were taken back from nats.c) and returns every outstanding
    /// export, oldest first, to be published again.
    func restart() -> [Export] {
        state.withLock { state in
            state.attempts.removeAll(keepingCapacity: true)
            return state.exports.values.sorted { $0.index < $1.index }
        }
    }
}
