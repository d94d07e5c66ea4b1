import Foundation
import Testing

/// A fatal signal another process sent is reported as sent, with the sender, not as a fault at
/// an address (the runtime's report reads the sender's pid as one).
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct SentSignalReportTests {
    @Test func aSentSIGSEGVNamesItsSender() async throws {
        let directory = try TemporaryDirectory()
        let daemon = try await DaemonProcessTests.Daemon.running("control:\n  socket: \(directory.path)/control.sock\n", in: directory)
        daemon.signal(SIGSEGV)
        let line = "*** Signal 11 was sent by process \(getpid()) (uid \(getuid())), not raised by a fault here"
        #expect(await daemon.waitFor(line), "\(daemon.output.prefix(2000))")
        // That a sent fatal signal ends the process is IsolationTests' business (a worker sent kill -SEGV).
        daemon.signal(SIGKILL)
    }
}
