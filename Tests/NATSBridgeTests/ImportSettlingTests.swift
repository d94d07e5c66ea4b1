@testable import NATSBridge
import Testing

/// When a posted batch of durable imports may be named in the position file: after the settle
/// time, once every tail has been handed it — or after the hand-over limit, whatever the tails.
@Suite struct ImportSettlingTests {
    private let start = ContinuousClock.now

    /// Batches posted at `seconds` after `start`, with bus sequences 100, 200, … .
    private func settling(postedAt seconds: [Double]) -> ImportSettling {
        var settling = ImportSettling()
        for (index, offset) in seconds.enumerated() {
            var ledger = ImportLedger()
            ledger.streamSequence = UInt64(index + 1)
            settling.append(.init(ledger: ledger, posted: start + .milliseconds(Int(offset * 1000)), total: UInt64(index + 1) * 10,
                                  sequence: UInt64(index + 1) * 100))
        }
        return settling
    }

    @Test func nothingIsRecordableBeforeItHasSettled() {
        let settling = settling(postedAt: [0, 0.5])
        #expect(settling.newestRecordable(now: start + .milliseconds(900), handedOut: { _ in true }) == nil)
        #expect(settling.newestRecordable(now: start + .milliseconds(1200), handedOut: { _ in true }) == 0)
        #expect(settling.newestRecordable(now: start + .milliseconds(1600), handedOut: { _ in true }) == 1)
    }

    @Test func aSettledBatchWaitsForTheTailsToBeHandedIt() {
        let settling = settling(postedAt: [0, 0.1, 0.2, 0.3, 0.4])
        let now = start + .seconds(2)
        var asked: [UInt64] = []
        // The tails have everything through bus sequence 250: batches 0 and 1 (100, 200).
        let newest = settling.newestRecordable(now: now, handedOut: { sequence in
            asked.append(sequence)
            return sequence <= 250
        })
        #expect(newest == 1)
        #expect(asked.count <= 3, "bisection, not a walk: \(asked)")
        #expect(settling.newestRecordable(now: now, handedOut: { _ in false }) == nil)
        #expect(settling.newestRecordable(now: now, handedOut: { _ in true }) == 4)
    }

    @Test func aTailThatStopsReadingHoldsPositionsNoLongerThanTheLimit() {
        let settling = settling(postedAt: [0, 5, 9.5])
        #expect(settling.newestRecordable(now: start + .milliseconds(9_900), handedOut: { _ in false }) == nil)
        #expect(settling.newestRecordable(now: start + .milliseconds(10_100), handedOut: { _ in false }) == 0)
        #expect(settling.newestRecordable(now: start + .milliseconds(15_100), handedOut: { _ in false }) == 1)
        // Handed over beats the limit where it reaches further.
        #expect(settling.newestRecordable(now: start + .milliseconds(15_100), handedOut: { $0 <= 300 }) == 2)
    }

    /// The limit is the host's `control.hand_out_patience`.
    @Test func theLimitIsTheOneGiven() {
        let settling = settling(postedAt: [0, 5])
        #expect(settling.newestRecordable(now: start + .seconds(30), patience: .seconds(60), handedOut: { _ in false }) == nil)
        #expect(settling.newestRecordable(now: start + .milliseconds(60_100), patience: .seconds(60), handedOut: { _ in false }) == 0)
        #expect(settling.newestRecordable(now: start + .milliseconds(1_100), patience: .zero, handedOut: { _ in false }) == 0)
    }

    @Test func aBatchBeforeAnyPostIsNotAskedAbout() {
        var settling = ImportSettling()
        settling.append(.init(ledger: ImportLedger(), posted: start, total: 0, sequence: 0))
        #expect(settling.newestRecordable(now: start + .seconds(2), handedOut: { _ in false }) == 0)
        settling.removeThrough(0)
        #expect(settling.isEmpty)
    }
}
