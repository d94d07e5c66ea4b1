@testable import NATSBridge
import Testing

/// How a durable import judges an event at or behind its origin's last: a copy the stream stored
/// twice is dropped, an event stored late is taken, and after a restart (nothing remembered)
/// everything at or behind the recorded position is a copy.
@Suite struct OriginWindowTests {
    /// Takes `sequences` of one origin as the importer does; returns each verdict.
    private func take(_ sequences: [UInt64], instance: UInt64 = 7, into window: inout OriginWindow,
                      ledger: inout ImportLedger) -> [OriginWindow.Verdict] {
        sequences.map { sequence in
            let verdict = window.judge(host: "alpha", instance: instance, sequence: sequence, last: ledger.origins["alpha"])
            switch verdict {
            case .inOrder:
                ledger.record(host: "alpha", instance: instance, sequence: sequence)
                window.taken(host: "alpha", instance: instance, sequence: sequence)
            case .late:
                window.taken(host: "alpha", instance: instance, sequence: sequence)
            case .duplicate:
                break
            }
            return verdict
        }
    }

    @Test func aCopyIsDroppedAndALateEventTaken() {
        var window = OriginWindow()
        var ledger = ImportLedger()
        // 1 2 4 5, then 3 (stored late), then 4 and 3 again (stored twice), then 6.
        let verdicts = take([1, 2, 4, 5, 3, 4, 3, 6], into: &window, ledger: &ledger)
        #expect(verdicts == [.inOrder, .inOrder, .inOrder, .inOrder, .late, .duplicate, .duplicate, .inOrder])
        #expect(ledger.origins["alpha"] == ImportLedger.Position(instance: 7, sequence: 6))
    }

    @Test func afterARestartEverythingAtOrBehindTheRecordedPositionIsACopy() {
        var ledger = ImportLedger()
        ledger.record(host: "alpha", instance: 7, sequence: 100)
        var window = OriginWindow()  // a new run remembers nothing
        #expect(take([100, 60, 101], into: &window, ledger: &ledger) == [.duplicate, .duplicate, .inOrder])
        // An older instance of the origin is behind every event of the newer one.
        #expect(take([500], instance: 6, into: &window, ledger: &ledger) == [.duplicate])
        // A newer instance (the origin restarted) starts over at 1.
        #expect(take([1, 2], instance: 8, into: &window, ledger: &ledger) == [.inOrder, .inOrder])
    }

    @Test func theWindowIsBounded() {
        var window = OriginWindow()
        var ledger = ImportLedger()
        let count = UInt64(OriginWindow.size) + 10
        _ = take(Array(1...count), into: &window, ledger: &ledger)
        // The oldest ones are forgotten: at or behind the last and beyond the window, a copy.
        #expect(take([5, count - 1], into: &window, ledger: &ledger) == [.duplicate, .duplicate])
        #expect(take([count + 2, count + 1], into: &window, ledger: &ledger) == [.inOrder, .late])
    }
}
