import EventBusHost
import Foundation
import Testing
import TestSupport

/// The sources' series in a real eventbusd's `/metrics`: a journal watch's lag (named by the
/// watch's configured name) over journal files written by systemd-journal-remote, and the file
/// source's overflow and rescan counters. Falling behind and overflowing are tested where they
/// can be made to happen deterministically: `JournalLagTests` and `FileSourceTests`.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct SourceMetricsTests {
    /// Writes `count` entries with `identifier` into the journal file `path` without a daemon,
    /// one second apart from `firstRealtime` (µs since the epoch). `monotonic` is the first
    /// entry's monotonic time: files of one boot must go on from each other's, since sd-journal
    /// orders entries of a boot by it.
    static func writeJournal(_ path: String, count: Int, identifier: String, firstRealtime: UInt64, monotonic: Int,
                             in directory: TemporaryDirectory) throws {
        var export = ""
        for index in 0..<count {
            export += "__REALTIME_TIMESTAMP=\(firstRealtime + UInt64(index) * 1_000_000)\n__MONOTONIC_TIMESTAMP=\(monotonic + index)\n"
            export += "_BOOT_ID=0123456789abcdef0123456789abcdef\nMESSAGE=entry \(index)\nSYSLOG_IDENTIFIER=\(identifier)\nPRIORITY=6\n\n"
        }
        let exportPath = try directory.write("\(identifier)-\(monotonic).export", export)
        #expect(try runShell("/lib/systemd/systemd-journal-remote -o \(path) - < \(exportPath)") == 0)
    }

    @Test func aJournalWatchThatCaughtUpShowsNoLagUnderItsNameAndTheFileCountersAreThere() async throws {
        let directory = try TemporaryDirectory()
        let journal = directory.path + "/journal"
        let files = directory.path + "/files"
        for folder in [journal, files] { try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true) }
        let now = UInt64(Date().timeIntervalSince1970 * 1e6)
        let day: UInt64 = 86_400_000_000
        // Old entries, there before the start: the watch starts at the tail, after them.
        try Self.writeJournal(journal + "/a.journal", count: 10, identifier: "lagtest", firstRealtime: now - 2 * day,
                              monotonic: 1, in: directory)
        let port = UInt16(try freeLoopbackPort())
        let (yaml, _) = controlConfig(directory, rest: """
            state_directory: \(directory.path)/state
            metrics:
              listen: 127.0.0.1:\(port)
            sources:
              journal:
                - name: old-entries
                  identifier: lagtest
                  directory: \(journal)
              files:
                - name: scratch
                  path: \(files)
            """)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        let scrape = { (try? http(port, "GET /metrics HTTP/1.1\r\nHost: eventbusd\r\n\r\n")) ?? "" }
        let watch = "{watch=\"old-entries\"}"
        #expect(await eventually { sampleValue(scrape(), "eventbus_journal_caught_up\(watch)") == 1 })
        #expect(sampleValue(scrape(), "eventbus_journal_entries_posted_total\(watch)") == 0)

        // Entries a day old arrive: posted, and once they are the lag is 0 although each is old.
        try Self.writeJournal(journal + "/b.journal", count: 50, identifier: "lagtest", firstRealtime: now - day,
                              monotonic: 100, in: directory)
        #expect(await eventually {
            let text = scrape()
            return sampleValue(text, "eventbus_journal_entries_posted_total\(watch)") == 50
                && sampleValue(text, "eventbus_journal_caught_up\(watch)") == 1
        })
        let text = scrape()
        #expect(sampleValue(text, "eventbus_journal_lag_seconds\(watch)") == 0)
        #expect(!text.contains("eventbus_journal_lag_seconds{watch=\"\"}"), "no journal source but the configured watch")

        // The file monitor's figures (as of the previous scrape): the counters are there, at 0.
        #expect(await eventually { sampleValue(scrape(), "eventbus_files_rescans_total") == 0 })
        #expect(sampleValue(scrape(), "eventbus_files_overflows_total") == 0)

        daemon.signal(SIGTERM)
        _ = await daemon.exitStatus()
    }
}
