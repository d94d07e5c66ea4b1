@_spi(EventBusHost) import EventBusKit

/// Which posted batches of durable imports may be named in the position file yet.
///
/// A position names events the next start will not fetch again, so it must not name an event
/// a SIGKILL could still take from a subscriber. Posting hands an event to the bus; the bus
/// hands it on to control-socket tails through each client's buffer, which dies with the
/// process. A batch is therefore recorded once it has been on the bus ``settleTime`` *and*
/// every tail has been handed it — written to its socket, whose bytes the client can read after
/// the host is gone (`Bus.hasHandedOut(through:)`, which the host's control socket answers).
/// A tail that stops reading must not hold every position forever: after
/// `Bus.handOutPatience` (`control.hand_out_patience`, 10 s by default) a batch is recorded
/// anyway.
///
/// Why the settle time besides the check: module mailboxes are not watched — what a module had
/// not run at a SIGKILL is gone with the process, imported or not — and a second on the bus is
/// what a loaded host's modules get before the position moves past their events.
///
/// Pure: the clock and the check are arguments, so the rule is tested without a bus or a server.
struct ImportSettling {
    struct Batch: Equatable {
        /// The ledger that may be recorded once this batch is.
        var ledger: ImportLedger
        /// When it was posted.
        var posted: ContinuousClock.Instant
        /// Events this run had posted by then (``DurableImporter``'s `import_unrecorded`).
        var total: UInt64
        /// The bus sequence of the last event this run had posted by then (0: none yet).
        var sequence: UInt64
    }

    /// The least time a batch is on the bus before it is recorded.
    static let settleTime = Duration.seconds(1)

    /// Waiting to be recorded, oldest first; their sequences never decrease.
    private(set) var batches: [Batch] = []

    var isEmpty: Bool { batches.isEmpty }
    var last: Batch? { batches.last }

    mutating func append(_ batch: Batch) {
        batches.append(batch)
    }

    /// The newest batch that may be recorded at `now`, or nil (`Bus.savablePosition`).
    /// `handedOut(s)` says whether every tail has been handed every event through bus sequence `s`;
    /// after `patience` (`Bus.handOutPatience`) a batch no longer waits for it.
    func newestRecordable(now: ContinuousClock.Instant, patience: Duration = Bus.defaultHandOutPatience,
                          handedOut: (UInt64) -> Bool) -> Int? {
        Bus.savablePosition(count: batches.count, now: now, settle: Self.settleTime, patience: patience, posted: { batches[$0].posted },
                            sequence: { batches[$0].sequence }, handedOut: handedOut).savable
    }

    /// Forgets the batches through `index` (recorded, or superseded by a later one).
    mutating func removeThrough(_ index: Int) {
        batches.removeFirst(index + 1)
    }
}
