import ControlProtocol
import Foundation
import Testing

/// The daemon's and the CLI's own options, through the real binaries: where eventbusd listens,
/// `--version`, and `post` arguments that are refused before anything is sent.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct CommandLineTests {
    @Test func eventbusdSocketOptionWinsOverTheConfig() async throws {
        let directory = try TemporaryDirectory()
        let configured = directory.path + "/configured.sock"
        let chosen = directory.path + "/chosen.sock"
        let config = try directory.write("eventbus.yaml", "control:\n  socket: \(configured)\n")
        let daemon = try DaemonProcessTests.Daemon(arguments: ["--config", config, "--socket", chosen], in: directory)
        #expect(await daemon.waitFor("ready; SIGHUP reloads"), "\(daemon.output)")

        let status = try await eventbus(["status", "--socket", chosen], in: directory)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(!FileManager.default.fileExists(atPath: configured), "the config's socket is not bound")

        // A reload keeps the socket the command line chose.
        daemon.signal(SIGHUP)
        #expect(await daemon.waitFor("reloaded"))
        #expect(try await eventbus(["status", "--socket", chosen], in: directory).status == 0)
        // The socket may also be named before the subcommand, in either spelling.
        #expect(try await eventbus(["--socket", chosen, "status"], in: directory).status == 0)
        #expect(try await eventbus(["--socket=\(chosen)", "modules"], in: directory).status == 0)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }

    /// Run by hand as a service user outside systemd (no `$XDG_RUNTIME_DIR`, no `/run/user/UID`),
    /// eventbusd cannot make its default socket, and says how to name one.
    @Test func aUserWithoutARuntimeFolderIsToldToNameASocket() async throws {
        let directory = try TemporaryDirectory()
        chmod(directory.path, 0o755)
        let config = try directory.write("eventbus.yaml", "sources: {}\n")
        chmod(config, 0o644)
        let user = try TestUser("ebnorun\(uniqueSuffix())")
        // The host and the SDK library it links, copied where that user can read them: the build
        // folder may sit in a checkout only root can enter (a `mktemp -d` clone is 0700).
        let eventbusd = directory.path + "/eventbusd"
        for (source, target) in [(BuildProducts.eventbusd, eventbusd),
                                 (BuildProducts.directory + "/libEventBusKit.so", directory.path + "/libEventBusKit.so")] {
            try copyClosingOnExec(source, to: target)
        }
        // A process another test spawns between its fork and its exec still holds the copy open
        // for writing, and executing it fails then (ETXTBSY): a moment later it does not.
        let runAsUser = {
            try await run("/usr/bin/setpriv", ["--reuid=\(user.userID)", "--regid=\(user.groupID)", "--init-groups", "--",
                                               eventbusd, "--config", config],
                          environment: ["PATH": "/usr/bin:/bin"])
        }
        var result = try await runAsUser()
        for _ in 0..<100 where result.output.contains("Text file busy") {
            try await Task.sleep(for: .milliseconds(50))
            result = try await runAsUser()
        }
        #expect(result.status == 1)
        #expect(result.output.contains("/run/user/\(user.userID)"), "\(result.output)")
        #expect(result.output.contains("--socket PATH"), "\(result.output)")
    }

    @Test func postStdinPostsEveryGoodLineInOrderAndNamesTheBadOnes() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let daemon = try await DaemonProcessTests.Daemon.running("control:\n  socket: \(socket)\n", in: directory)
        defer { withExtendedLifetime(daemon) {} }
        var lines = (1...3000).map { #"{"name":"load.step","fields":{"n":\#($0)}}"# }
        lines.insert("not json", at: 10)
        lines.insert(#"{"name":"bad..name"}"#, at: 20)
        lines.insert(#"{"fields":{}}"#, at: 30)
        lines.insert("", at: 40)
        lines.insert(#"{"name":"load.step","fields":{"v":null}}"#, at: 1500)  // refused by the host, inside a batch
        let input = try directory.write("events.jsonl", lines.joined(separator: "\n") + "\n")

        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "3000", "load.>"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        let post = await (try CLIProcess(["post", "--stdin", "--print-seq", "--socket", socket], in: directory, input: input)).finish()
        #expect(post.status == 1)
        #expect(post.stderr.contains("stdin:11: invalid literal"), "\(post.stderr)")
        #expect(post.stderr.contains(#"stdin:21: event name "bad..name""#), "\(post.stderr)")
        #expect(post.stderr.contains(#"stdin:31: "name" (a string) is missing"#), "\(post.stderr)")
        #expect(post.stderr.contains(#"stdin:1501: field "v": a value is a string, number or boolean, found null"#), "\(post.stderr)")
        #expect(post.stderr.contains("4 line(s) of standard input were not posted"))
        let cursors = post.lines.compactMap(EventCursor.init)
        let sequences = cursors.map { Int64($0.sequence) }
        #expect(sequences.count == 3000 && sequences == sequences.sorted(), "one sequence number per posted line, in order")
        #expect(Set(cursors.map(\.life)).count == 1 && cursors.first?.life != nil, "each with the host's life")

        let received = await tail.finish()
        #expect(received.jsonLines.map { $0["fields"]?["n"]?.intValue ?? 0 } == (1...3000).map(Int64.init))
        #expect(received.jsonLines.map { $0["seq"]?.intValue ?? 0 } == sequences)
    }

    @Test func postStdinSplitsBatchesAtTheLineLimitAndNamesALineThatFitsNone() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let daemon = try await DaemonProcessTests.Daemon.running("control:\n  socket: \(socket)\n", in: directory)
        defer { withExtendedLifetime(daemon) {} }
        // Two of these do not fit one request line; the one in the middle fits none.
        func line(_ n: Int, padding: Int) -> String {
            #"{"name":"load.big","fields":{"n":\#(n),"p":"\#(String(repeating: "x", count: padding))"}}"#
        }
        var lines = (1...6).map { line($0, padding: 600_000) }
        lines.insert(line(0, padding: ControlProtocol.maximumLineLength), at: 3)
        let input = try directory.write("big.jsonl", lines.joined(separator: "\n") + "\n")

        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "6", "load.>"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        let post = await (try CLIProcess(["post", "--stdin", "--socket", socket], in: directory, input: input)).finish()
        #expect(post.status == 1)
        #expect(post.stderr.contains("stdin:4: longer than a request may be"), "\(post.stderr)")
        #expect(post.stderr.contains("1 line(s) of standard input were not posted"), "\(post.stderr)")
        let received = await tail.finish()
        #expect(received.jsonLines.map { $0["fields"]?["n"]?.intValue ?? 0 } == Array(1...6))
    }

    @Test func bothBinariesPrintTheirVersion() async throws {
        let directory = try TemporaryDirectory()
        let cli = try await eventbus(["--version"], in: directory)
        #expect(cli.status == 0)
        #expect(cli.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "eventbus \(ControlProtocol.versionLine)")
        let daemon = try DaemonProcessTests.Daemon(arguments: ["--version"], in: directory)
        #expect(await daemon.exitStatus() == 0)
        #expect(daemon.output.trimmingCharacters(in: .whitespacesAndNewlines) == "eventbusd \(ControlProtocol.versionLine)")
    }

    /// Refused while parsing (exit 64, `post`'s own usage), so no host is needed and nothing is
    /// posted half-right.
    @Test(arguments: [
        (["n=12345678901234567890"], "12345678901234567890 is beyond a 64-bit integer"),
        (["n=-99999999999999999999"], "beyond a 64-bit integer"),
        (["a=1", "a=2"], #"the field "a" is given twice"#),
        (["--json", #"{"a": 1}"#, "a=2"], #"the field "a" is given twice"#),
        (["--json", #"{"a": 1, "a": 2}"#], #"the key "a" appears twice"#),
        (["--json", #"{"big": 18446744073709551615}"#], "integer out of range"),
    ])
    func postRefusesFieldsThatWouldChangeOrVanish(arguments: [String], message: String) async throws {
        let directory = try TemporaryDirectory()
        let result = try await eventbus(["post", "--socket", directory.path + "/none.sock", "app.x"] + arguments, in: directory)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(result.stderr.contains("eventbus post"), "post's usage, not the top level's: \(result.stderr)")
    }
}

/// Copies `source` to `target` (mode 0755) through a descriptor opened close-on-exec: one that
/// a child of another test inherited would stay open for writing across that child's exec, for
/// its whole life, and executing the copy would fail with ETXTBSY all that time.
private func copyClosingOnExec(_ source: String, to target: String) throws {
    let bytes = try Data(contentsOf: URL(fileURLWithPath: source))
    let fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o755)
    guard fd >= 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    defer { close(fd) }
    try FileHandle(fileDescriptor: fd, closeOnDealloc: false).write(contentsOf: bytes)
    fchmod(fd, 0o755)
}
