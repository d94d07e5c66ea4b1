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

    /// The kinds whose whole line is hundreds of characters lead with what a person looks for,
    /// about a terminal's width; `-o verbose` shows every field as the short line used to, and
    /// `--json` stays complete. The journal entry and unit state carry every field their sources
    /// give them (measured: 450 and 473 characters whole, against 111 and 92 short here).
    @Test func knownKindsLeadWithWhatMattersAndVerboseShowsEverything() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        defer { withExtendedLifetime(daemon) {} }
        let (connection, _) = try rawConnection(socket)
        let journal: JSON = ["name": "journal.entry", "fields": [
            "boot_id": "0123456789abcdef0123456789abcdef",
            "cursor": "s=3a996a07c41f4011b92695badd78c698;i=1;b=0123456789abcdef0123456789abcdef;m=1e240;t=66165875eebc0;x=b8810b623961a20a",
            "identifier": "sshd", "message": "Accepted publickey for root from 10.0.0.5 port 52144 ssh2: ED25519 SHA256:abc",
            "monotonic_us": .int(123456), "pid": .int(812), "priority": .int(6), "realtime_us": .int(1795938551000000),
            "unit": "ssh.service"]]
        let unit: JSON = ["name": "unit.state", "fields": [
            "unit": "nginx.service", "origin": "change", "active_state": "failed", "sub_state": "failed", "load_state": "loaded",
            "result": "exit-code", "exec_main_code": .int(1), "exec_main_status": .int(1),
            "invocation_id": "5c4d0b5a2f8e4b7c9a1d3e6f7a8b9c0d", "old_active_state": "active", "old_sub_state": "running",
            "old_load_state": "loaded", "old_result": "success", "old_exec_main_code": .int(0), "old_exec_main_status": .int(0),
            "old_invocation_id": "5c4d0b5a2f8e4b7c9a1d3e6f7a8b9c0d", "changed_us": .int(1795938551000000),
            "changed_monotonic_us": .int(2559749307614)]]
        try connection.send(["op": "post", "events": [
            journal, unit,
            ["name": "unit.state", "fields": ["unit": "cron.service", "origin": "snapshot", "active_state": "active", "sub_state": "running"]],
            ["name": "unit.job", "fields": ["unit": "nginx.service", "job_id": .int(812), "phase": "finished", "job_type": "restart", "result": "done"]],
            ["name": "fs.moved", "fields": ["path": "/etc/app/new.conf", "old_path": "/etc/app/old.conf", "cookie": .int(7), "origin": "event"]],
            ["name": "device.added", "fields": ["subsystem": "block", "sysname": "sdb1", "devnode": "/dev/sdb1",
                                                "syspath": "/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/block/sdb/sdb1", "from": "udev", "origin": "event"]],
            ["name": "app.deploy", "fields": ["env": "prod"]],
        ]])
        let answer = try #require(try connection.readJSON())
        let first = try #require(answer["seqs"]?.arrayValue?.first?.intValue, "\(answer)")
        func tail(_ format: [String]) async throws -> [String] {
            let result = try await eventbus(["tail", "--socket", socket, "--no-follow", "--since", "\(first)", "--utc"] + format, in: directory)
            #expect(result.status == 0, "\(result.stderr)")
            // Without the time: "Mar 05 14:02:11.123 " is 20 characters.
            return result.stdout.split(separator: "\n").map { String($0.dropFirst(20)) }
        }
        let short = try await tail([])
        #expect(short == [
            "#\(first) sshd[812]: Accepted publickey for root from 10.0.0.5 port 52144 ssh2: ED25519 SHA256:abc",
            "#\(first + 1) nginx.service: active/running → failed/failed (exit-code, status 1)",
            "#\(first + 2) cron.service: active/running (snapshot)",
            "#\(first + 3) nginx.service: restart job 812 finished: done",
            "#\(first + 4) /etc/app/old.conf → /etc/app/new.conf: moved",
            "#\(first + 5) block/sdb1: added /dev/sdb1",
            "#\(first + 6) app.deploy (user) env=prod",
        ], "\(short)")
        #expect(short[0].count + 20 <= 120 && short[1].count + 20 <= 100, "about a terminal's width")

        let verbose = try await tail(["-o", "verbose"])
        #expect(verbose.count == 7)
        #expect(verbose[0].hasPrefix("#\(first) journal.entry (user) boot_id=0123456789abcdef0123456789abcdef cursor="), "\(verbose[0])")
        #expect(verbose[0].hasSuffix("unit=ssh.service: Accepted publickey for root from 10.0.0.5 port 52144 ssh2: ED25519 SHA256:abc"))
        for key in (unit["fields"]?.objectValue ?? [:]).keys { #expect(verbose[1].contains(" \(key)="), "\(key) in \(verbose[1])") }
        #expect(verbose[6] == short[6], "other events are shown whole either way")

        let json = try await eventbus(["tail", "--socket", socket, "--no-follow", "--since", "\(first)", "--json"], in: directory)
        #expect(json.jsonLines.first?["fields"] == journal["fields"], "--json stays complete")
        #expect(json.jsonLines.dropFirst().first?["fields"] == unit["fields"])
    }
}
