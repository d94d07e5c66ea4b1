import ControlProtocol
import Foundation
import Testing

/// Cursors (`LIFE:SEQ`) through the real eventbusd and CLI, across a restart: each host process
/// has a life of its own, `post --print-seq` prints it with the number, and `tail --since` with
/// a cursor of an earlier life starts at the new life's first event, saying that events between
/// the lives are not replayed — where a bare number used to print nothing and say nothing.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct CursorAcrossRestartsTests {
    @Test func aCursorOfAnEarlierLifeStartsAtTheNewLifesFirstEventAndSaysSo() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let config = "control: {socket: \(socket)}\n"
        var daemon = try await DaemonProcessTests.Daemon.running(config, in: directory)
        for number in 1...5 {
            #expect(try await eventbus(["post", "--socket", socket, "user.filler", "n=\(number)"], in: directory).status == 0)
        }
        let saved = try await eventbus(["post", "--socket", socket, "--print-seq", "user.before"], in: directory)
        let savedText = saved.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let cursor = try #require(EventCursor(savedText), "\(saved.stdout)")
        let firstLife = try #require(cursor.life)
        #expect(cursor.sequence == 6)

        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
        daemon = try await DaemonProcessTests.Daemon.running(config, in: directory)
        let status = try await eventbus(["status", "--socket", socket], in: directory)
        let secondLife = try #require(status.stdout.split(separator: " ").firstIndex(of: "life")
            .map { String(status.stdout.split(separator: " ")[$0 + 1]) }, "\(status.stdout)")
        #expect(secondLife != firstLife, "\(status.stdout)")
        #expect(try await eventbus(["post", "--socket", socket, "user.after"], in: directory).status == 0)

        // The saved cursor: the new life's events from #1, after a line that says what happened.
        let human = try await eventbus(["tail", "--socket", socket, "--since", savedText, "--no-follow", "user.>"], in: directory)
        #expect(human.status == 0, "\(human.stderr)")
        #expect(human.stdout.contains("-- \(savedText) is from an earlier eventbusd (life \(firstLife)); this one (life \(secondLife.trimmingCharacters(in: .punctuationCharacters))) numbers its events from #1 and the tail starts there: events posted between the two lives are not replayed --"), "\(human.stdout)")
        #expect(human.stdout.contains("user.after"), "\(human.stdout)")
        #expect(!human.stdout.contains("user.before"), "\(human.stdout)")
        // For a program the line goes to standard error; standard output holds only events.
        let json = try await eventbus(["tail", "--socket", socket, "--since", savedText, "--no-follow", "--json", "user.>"], in: directory)
        #expect(json.status == 0, "\(json.stderr)")
        #expect(json.jsonLines.map { $0["name"]?.stringValue } == ["user.after"], "\(json.stdout)")
        #expect(json.stderr.contains("is from an earlier eventbusd"), "\(json.stderr)")
        // A window that ended in the earlier life is refused, not silently empty.
        let window = try await eventbus(["tail", "--socket", socket, "--until", savedText, "--no-follow"], in: directory)
        #expect(window.status == 1)
        #expect(window.stderr.contains("until_seq counts in life \(firstLife)"), "\(window.stderr)")
        // A bare number is the running host's, as before.
        let bare = try await eventbus(["tail", "--socket", socket, "--since", "1", "--no-follow", "--json", "user.>"], in: directory)
        #expect(bare.jsonLines.map { $0["name"]?.stringValue } == ["user.after"], "\(bare.stdout)")
        #expect(!bare.stderr.contains("earlier"), "\(bare.stderr)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }
}
