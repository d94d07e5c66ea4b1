import ControlProtocol
import Foundation
import Testing

/// `eventbus tail`'s short format, exactly, for values that take each of its ways: copied from
/// the line (plain text, integers, shortest fractions), parsed one by one (escapes, non-ASCII,
/// exponents), and the whole line parsed (an imported event's origin).
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ShortFormatTests {
    @Test func theShortFormatShowsTrickyValuesExactlyInUTCAndAnyZoneWithUTC() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        defer { withExtendedLifetime(daemon) {} }
        let (connection, _) = try rawConnection(socket)
        try connection.send(["op": "post", "events": [
            ["name": "fmt.plain", "fields": [
                "s": "plain", "q": "has space", "e": "", "eq": "a=b", "i": .int(-42), "z": .int(0), "big": .double(1e16),
                "d": .double(12.5), "tiny": .double(0.00001), "b": .bool(true), "f": .bool(false), "max": .int(.max),
                "message": "hello world", "priority": .int(3)]],
            ["name": "fmt.escape", "fields": [
                "esc": "x\u{1B}[31my", "nl": "l1\nl2", "quote": "say \"hi\"", "c1": "\u{85}x\u{2028}y", "u": "café ✓",
                "tab": "a\tb", "del": "a\u{7F}b"]],
            ["name": "fmt.bare"],
            ["name": "fmt.origin", "fields": ["@origin.host": "web-1", "@origin.seq": .int(5), "x": .int(1)]],
            ["name": "fmt.message", "fields": ["message": .int(7), "Zed": "up", "a": .double(0.1)]],
        ]])
        let answer = try #require(try connection.readJSON())
        let first = try #require(answer["seqs"]?.arrayValue?.first?.intValue, "\(answer)")

        let json = try await eventbus(["tail", "--socket", socket, "--json", "--no-follow", "--since", "\(first)"], in: directory)
        let events = json.jsonLines
        #expect(events.count == 5, "\(json.stdout)")
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func clock(_ event: JSON) -> String {  // "2026-11-24T19:31:04.237254Z" → "Nov 24 19:31:04.237"
            let time = Array(event["time"]?.stringValue ?? "")
            return months[Int(String(time[5..<7]))! - 1] + " " + String(time[8..<10]) + " " + String(time[11..<23])
        }
        let rest = [
            #"fmt.plain (user) b=true big=1e+16 d=12.5 e="" eq="a=b" f=false i=-42 max=9223372036854775807 priority=3 q="has space" s=plain tiny=1e-05 z=0: hello world"#,
            #"fmt.escape (user) c1="\u{85}x\#u{2028}y" del=a\x7fb esc=x\x1b[31my nl="l1\nl2" quote="say \"hi\"" tab=a\tb u="café ✓""#,
            "fmt.bare (user)",
            "fmt.origin (user) from web-1#5 x=1",
            "fmt.message (user) Zed=up a=0.1: 7",
        ]
        let expected = zip(events, rest).map { event, rest in
            "\(clock(event)) #\(event["seq"]?.intValue ?? 0) \(rest)\n"
        }.joined()

        let utc = try await CLIProcess(["tail", "--socket", socket, "--no-follow", "--since", "\(first)", "--utc"],
                                       in: directory, environment: ["TZ": "XST-05:30"]).finish()
        #expect(utc.status == 0, "\(utc.stderr)")
        #expect(utc.stdout == expected)
        let zoneUTC = try await CLIProcess(["tail", "--socket", socket, "--no-follow", "--since", "\(first)"],
                                           in: directory, environment: ["TZ": "UTC"]).finish()
        #expect(zoneUTC.stdout == expected)
    }
}
