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
        // The whole report, then the end by that signal. (The report used to stop at
        // "Registers:" with the process killed under it, and swift-backtrace stayed, holding
        // eventbusd's descriptors — Foundation's too, so this test saw eventbusd as running.)
        #expect(await daemon.waitFor("Backtrace took"), "\(daemon.output.suffix(3000))")
        let status = await daemon.exitStatus()
        #expect(status == SIGSEGV, "still running, or ended otherwise")
        if status != nil { #expect(daemon.process.terminationReason == .uncaughtSignal) }
        #expect(daemon.output.contains("Images ("), "\(daemon.output.suffix(3000))")
    }
}
