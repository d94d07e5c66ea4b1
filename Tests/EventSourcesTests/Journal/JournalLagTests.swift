import EventBusKit
import EventSources
import Foundation
import Testing

/// How far a journal source is behind the journal's tail (``JournalLag``), on journal files
/// written without a daemon with timestamps one second apart, so the lag in seconds is a number
/// of entries the test knows — never a measured time.
@Suite("Journal: lag behind the tail")
struct JournalLagTests {
    @Test("held in its first delivery: the lag is the span to the newest matching entry; released: 0 and caught up")
    func behindThenCaughtUp() async throws {
        let count = 3000  // several batches: the reader hands a full one over and looks up the tail
        let start = UInt64((Date().timeIntervalSince1970 - 86_400) * 1e6)  // a day ago, one a second
        let folder = try TemporaryDirectory("eventbus-journal-test")
        try journalWriteFile(folder.path + "/a.journal", messages: (0..<count).map { "l\($0)" }, identifier: "lag",
                             firstRealtime: start, spacing: 1_000_000)
        // Newer entries the watch does not match: not its tail.
        try journalWriteFile(folder.path + "/b.journal", messages: (0..<100).map { "o\($0)" }, identifier: "other",
                             firstRealtime: start + UInt64(count + 10) * 1_000_000, spacing: 1_000_000)
        let state = try TemporaryDirectory("eventbus-journal-state")
        let bus = Bus()
        let lags = JournalLags()
        JournalDriver.register(on: bus, configuration: .init(stateDirectory: state.path, lags: lags))

        let release = DispatchSemaphore(value: 0)
        let seen = JournalCollected(0)
        let watch = JournalWatch(match: .identifier("lag"), location: .directory(folder.path), start: .head)
        let subscription = try bus.journal(watch).sink { event in
            guard event.journalEntry != nil else { return }
            if seen.update({ $0 += 1; return $0 }) == 1 { release.wait() }
        }
        let lag = try #require(lags.all.first)
        #expect(lag.watch == watch)

        // The stage is held in the first delivery: nothing posted; the oldest entry waiting is
        // the first, the newest matching one the last "lag" entry, count - 1 seconds later.
        #expect(await eventually { lag.figures.seconds == Double(count - 1) })
        #expect(lag.figures.caughtUp == false)
        #expect(lag.figures.posted == 0)

        release.signal()
        #expect(await eventually { lag.figures.caughtUp && lag.figures.posted == UInt64(count) })
        #expect(lag.figures.seconds == 0)
        #expect(seen.value == count, "looking up the tail loses no entry and repeats none")

        subscription.cancel()
        #expect(lags.all.isEmpty, "a stopped source leaves the list")
    }

    @Test("from the tail with nothing new: caught up, no lag")
    func caughtUpAtTheTail() async throws {
        let folder = try TemporaryDirectory("eventbus-journal-test")
        try journalWriteFile(folder.path + "/a.journal", messages: ["old"], identifier: "lag",
                             firstRealtime: UInt64((Date().timeIntervalSince1970 - 3600) * 1e6))
        let state = try TemporaryDirectory("eventbus-journal-state")
        let bus = Bus()
        let lags = JournalLags()
        JournalDriver.register(on: bus, configuration: .init(stateDirectory: state.path, lags: lags))
        let subscription = try bus.journal(JournalWatch(match: .identifier("lag"), location: .directory(folder.path))).sink { _ in }
        let lag = try #require(lags.all.first)
        #expect(await eventually { lag.figures.caughtUp })
        #expect(lag.figures.seconds == 0 && lag.figures.posted == 0)
        subscription.cancel()
    }
}
