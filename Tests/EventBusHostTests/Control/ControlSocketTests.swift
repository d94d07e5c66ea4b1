import ControlProtocol
import EventBusHost
import Foundation
import Testing

/// The control socket end to end: the real eventbusd as a child process, the real `eventbus`
/// CLI (and raw socket clients where the test needs to misbehave). No timing assertions: every
/// wait is for a condition, bounded only to fail a broken test.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ControlSocketTests {
    @Test func tailSeesPostedEventsWithTypedFieldsAndTimerTicks() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory, rest: """
            sources:
              timers:
                - {name: fast, every: 100ms}
            """)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)

        let ticks = try await eventbus(["tail", "--socket", socket, "--json", "--count", "2", "timer.tick"], in: directory)
        #expect(ticks.status == 0, "\(ticks.stderr)")
        #expect(ticks.jsonLines.count == 2)
        #expect(ticks.jsonLines.allSatisfy { $0["name"] == "timer.tick" && $0["source"]?.stringValue?.hasPrefix("timer:") == true })

        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "1", "user.>"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        let post = try await eventbus(["post", "--socket", socket, "user.deploy.done", "env=prod", "replicas=3",
                                       "ratio=0.5", "canary=false", "note=two words"], in: directory)
        #expect(post.status == 0, "\(post.stderr)")
        let result = await tail.finish()
        #expect(result.status == 0, "\(result.stderr)")
        let event = try #require(result.jsonLines.first)
        #expect(event["type"] == "event")
        #expect(event["name"] == "user.deploy.done")
        #expect(event["source"] == "user")
        #expect(event["seq"]?.intValue ?? 0 > 0)
        #expect(event["time"]?.stringValue?.hasSuffix("Z") == true)
        #expect(event["fields"] == ["env": "prod", "replicas": .int(3), "ratio": .double(0.5), "canary": .bool(false), "note": "two words"])

        // The human format: time, #seq, name, (source), fields.
        let human = try await eventbus(["tail", "--socket", socket, "--last", "1", "--count", "1", "user.>"], in: directory)
        #expect(human.status == 0)
        #expect(human.stdout.contains("user.deploy.done (user) canary=false env=prod note=\"two words\" ratio=0.5 replicas=3"), "\(human.stdout)")
        #expect(!human.stdout.contains("\u{1B}["), "no colour when stdout is not a terminal")
        #expect(post.stdout.isEmpty, "quiet on success unless asked")

        // --print-seq: the cursor LIFE:SEQ tail --since takes, and it names that very event.
        let numbered = try await eventbus(["post", "--socket", socket, "--print-seq", "user.numbered", "n=7"], in: directory)
        #expect(numbered.status == 0, "\(numbered.stderr)")
        let cursorText = numbered.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let cursor = try #require(EventCursor(cursorText))
        let sequence = Int64(cursor.sequence)
        #expect(sequence > event["seq"]?.intValue ?? .max)
        let status = try await eventbus(["status", "--socket", socket], in: directory)
        #expect(status.stdout.contains("life \(try #require(cursor.life))"), "\(status.stdout)")
        // The cursor, and the bare number as before.
        for since in [cursorText, String(sequence)] {
            let replayed = try await eventbus(["tail", "--socket", socket, "--json", "--since", since,
                                               "--count", "1", "user.>"], in: directory)
            #expect(replayed.jsonLines.first?["seq"]?.intValue == sequence)
            #expect(replayed.jsonLines.first?["name"] == "user.numbered")
        }
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func replaySinceAndLastWithAGapForWhatTheRingNoLongerHolds() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory, control: "  replay_events: 5")
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        try postMany(socket, name: "user.replay", count: 8)  // sequences 1…8; the ring keeps 4…8

        let since = try await eventbus(["tail", "--socket", socket, "--json", "--since", "6", "--count", "3"], in: directory)
        #expect(since.status == 0, "\(since.stderr)")
        #expect(since.jsonLines.map { $0["seq"]?.intValue } == [6, 7, 8])
        #expect(since.jsonLines.map { $0["fields"]?["n"]?.intValue } == [6, 7, 8])

        let last = try await eventbus(["tail", "--socket", socket, "--json", "--last", "2", "--count", "2", "user.replay"], in: directory)
        #expect(last.jsonLines.map { $0["seq"]?.intValue } == [7, 8], "\(last.stdout)")

        // Since 2: events 2 and 3 are gone; the stream says so, then replays 4…8.
        let old = try await eventbus(["tail", "--socket", socket, "--json", "--since", "2", "--count", "5"], in: directory)
        #expect(old.status == 0, "\(old.stderr)")
        let lines = old.jsonLines
        #expect(lines.first == ["type": "gap", "reason": "replay", "dropped": .int(2), "first_seq": .int(2), "last_seq": .int(3)], "\(old.stdout)")
        #expect(lines.dropFirst().map { $0["seq"]?.intValue } == [4, 5, 6, 7, 8])

        // A replay joins the live stream with nothing lost or doubled.
        let joined = try CLIProcess(["tail", "--socket", socket, "--json", "--since", "7", "--count", "4", "user.replay"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        try postMany(socket, name: "user.replay", count: 2)
        let result = await joined.finish()
        #expect(result.jsonLines.map { $0["seq"]?.intValue } == [7, 8, 9, 10], "\(result.stdout)")

        let human = try await eventbus(["tail", "--socket", socket, "--since", "1", "--count", "1"], in: directory)
        #expect(human.stdout.contains("-- 5 event(s) before the replay are no longer held by eventbusd (#1-#5) --"), "\(human.stdout)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }

    @Test func malformedRequestsGetAnErrorLineAndTheConnectionCarriesOn() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        let (connection, hello) = try rawConnection(socket)
        #expect(hello["type"] == "hello")
        #expect(hello["protocol"] == .int(Int64(ControlProtocol.version)))
        #expect(hello["may"] == ["tail", "status", "modules", "rules", "stats", "metrics", "post", "reload"])

        func answer(_ line: String) throws -> JSON {
            try connection.send(Array((line + "\n").utf8))
            return try #require(try connection.readJSON())
        }
        #expect(try answer("garbage")["code"] == "bad_json")
        #expect(try answer("{\"op\": ")["code"] == "bad_json")
        #expect(try answer("[1, 2]")["code"] == "bad_request")
        #expect(try answer(#"{"op": "launch", "id": 1}"#) == ["type": "error", "code": "unknown_op", "id": .int(1),
                                                              "message": "unknown op \"launch\"; expected one of subscribe, post, status, modules, rules, stats, listing, metrics, reload"])
        let pattern = try answer(#"{"op": "subscribe", "patterns": ["fs..x"]}"#)
        #expect(pattern["code"] == "invalid_pattern")
        #expect(pattern["message"]?.stringValue?.contains("token 2 is empty") == true)
        #expect(try answer(#"{"op": "subscribe", "sinse_seq": 3}"#)["code"] == "bad_request")
        #expect(try answer(#"{"op": "post", "name": "bad name"}"#)["code"] == "invalid_name")
        #expect(try answer(#"{"op": "post", "name": "user.x", "fields": {"a": [1]}}"#)["code"] == "bad_request")
        #expect(try answer(#"{"op": "subscribe", "files": 5}"#)["code"] == "bad_request")

        // A line at the limit is a request; one byte more is refused, whether or not the whole
        // line arrives in one read. A blank line is no request and gets no answer.
        func post(padding: Int) -> String {
            let head = #"{"op": "post", "name": "user.long", "fields": {"p": ""#, tail = #""}}"#
            return head + String(repeating: "x", count: padding - head.utf8.count - tail.utf8.count) + tail
        }
        #expect(try answer(post(padding: ControlProtocol.maximumLineLength))["type"] == "posted")
        #expect(try answer(post(padding: ControlProtocol.maximumLineLength + 1))["code"] == "line_too_long")
        try connection.send(Array("\n  \r\n".utf8))

        // Still the same connection, still answering.
        let status = try answer(#"{"op": "status", "id": "s1"}"#)
        #expect(status["type"] == "status")
        #expect(status["id"] == "s1")
        let posted = try answer(#"{"op": "post", "name": "user.after.errors"}"#)
        #expect(posted["type"] == "posted")
        #expect(posted["seq"]?.intValue ?? 0 > 0)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }

    @Test func aClientThatStopsReadingLosesItsOwnEventsAnnouncedAndSlowsNobody() async throws {
        let directory = try TemporaryDirectory()
        let total = 20_000
        let (yaml, socket) = controlConfig(directory, control: "  client_buffer: 50000")
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)

        // The stalled client: a 100-event buffer, and it reads nothing until every event is posted.
        let (stalled, _) = try rawConnection(socket)
        try stalled.send(["op": "subscribe", "patterns": ["load.>"], "buffer": .int(100)])
        #expect(try stalled.readJSON()?["type"] == "subscribed")
        let reader = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "\(total)", "load.>"], in: directory)
        #expect(await waitForTailing(socket, count: 2))

        try postMany(socket, name: "load.test", count: total)
        let result = await reader.finish()
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.jsonLines
        #expect(lines.count == total)
        #expect(lines.allSatisfy { $0["type"] == "event" }, "the reading client lost nothing")
        #expect(lines.map { $0["fields"]?["n"]?.intValue ?? 0 } == (1...total).map(Int64.init))

        // Now the stalled one reads: events, and gap lines exactly where events are missing (one
        // per run of drops: its socket took some events whenever the kernel buffer had room).
        // Only load.test events were posted, so bus sequence n is event n: every sequence from 1
        // to `total` is either delivered or inside a gap, in order.
        var next: Int64 = 1
        var events = 0
        var dropped: Int64 = 0
        while next <= Int64(total) {
            let line = try #require(try stalled.readJSON())
            if line["type"] == "event" {
                #expect(line["seq"]?.intValue == next)
                next += 1
                events += 1
            } else {
                #expect(line["type"] == "gap")
                #expect(line["reason"] == "slow_client")
                #expect(line["first_seq"]?.intValue == next)
                let last = try #require(line["last_seq"]?.intValue)
                #expect(line["dropped"]?.intValue == last - next + 1)
                dropped += last - next + 1
                next = last + 1
            }
        }
        #expect(events >= 100 && dropped > 0)
        let stats = try ask(socket, ["op": "stats"])
        #expect(stats["tailing"]?.arrayValue?.compactMap { $0["dropped"]?.intValue }.max() == dropped)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func statusAndModulesShowTheHost() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory, rest: """
            sources:
              timers:
                - {name: slow, every: 1h}
            modules:
              counter:
                path: \(BuildProducts.fixture("FixtureCounter"))
                isolation: none
                config: {pattern: "user.>"}
              broken:
                path: \(BuildProducts.fixture("FixtureActivationThrows"))
            """)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        try postMany(socket, name: "user.count", count: 3)
        #expect(await eventually {
            ((try? ask(socket, ["op": "modules"]))?["modules"]?.arrayValue?.first?["delivered"]?.intValue ?? 0) >= 3
        })

        let status = try await eventbus(["status", "--socket", socket], in: directory)
        #expect(status.status == 0, "\(status.stderr)")
        #expect(status.stdout.contains("eventbusd pid \(daemon.process.processIdentifier), up "), "\(status.stdout)")
        #expect(status.stdout.contains("timer:every 3600.0 seconds"), "\(status.stdout)")
        #expect(status.stdout.contains("NAME     STATE   ISOLATION  RESTARTS  DELIVERED  DROPPED  QUEUED  ERRORS  VERSION"), "\(status.stdout)")
        #expect(status.stdout.contains("counter  active  none       0         3          0        0       0       fixture-counter 1.0.0"), "\(status.stdout)")
        #expect(status.stdout.contains("broken   failed  process    0"), "refused in its worker: \(status.stdout)")
        #expect(status.stdout.contains("broken   failed"))
        #expect(status.stdout.contains("└ activate threw"))

        let modules = try await eventbus(["modules", "--socket", socket, "--json"], in: directory)
        let list = try JSON.parse(modules.stdout)["modules"]?.arrayValue ?? []
        #expect(list.map { $0["name"] } == ["counter", "broken"])
        #expect(list.first?["state"] == "active")
        #expect(list.last?["state"] == "failed")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }

    @Test func usersOutsideTheGroupsAreRefusedAndLogged() async throws {
        let directory = try TemporaryDirectory()
        chmod(directory.path, 0o711)  // the test users must reach the socket's folder
        let suffix = uniqueSuffix()
        let tailGroup = try TestGroup("ebt\(suffix)")
        let postGroup = try TestGroup("ebp\(suffix)")
        let outsider = try TestUser("ebo\(suffix)")
        let tailer = try TestUser("ebr\(suffix)", groups: [tailGroup.name])
        let (yaml, socket) = controlConfig(directory, control: """
              tail_group: \(tailGroup.name)
              post_group: \(postGroup.name)
            """)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        var info = stat()
        #expect(stat(socket, &info) == 0 && info.st_mode & 0o777 == 0o660 && info.st_gid == getgrnam(tailGroup.name).pointee.gr_gid)
        #expect(stat(directory.path + "/run", &info) == 0 && info.st_mode & 0o777 == 0o750)

        // Outside every group: the socket's permissions keep the user out.
        let outside = try await eventbus(["status", "--socket", socket], as: outsider, in: directory)
        #expect(outside.status == 1)
        #expect(outside.stderr.contains("permission denied on \(socket)"), "\(outside.stderr)")

        // In the tail group: may read, may not post — eventbusd refuses by peer credentials.
        let status = try await eventbus(["status", "--socket", socket], as: tailer, in: directory)
        #expect(status.status == 0, "\(status.stderr)")
        let post = try await eventbus(["post", "--socket", socket, "user.sneaky"], as: tailer, in: directory)
        #expect(post.status == 1)
        #expect(post.stderr.contains("eventbusd refused: uid \(tailer.userID) is neither root nor in group \(postGroup.name), which may post"), "\(post.stderr)")
        #expect(await daemon.waitFor("control: refused post from uid \(tailer.userID) (pid "), "\(daemon.output)")

        // Even with the file's permissions opened up, eventbusd checks who is calling.
        chmod(directory.path + "/run", 0o755)
        chmod(socket, 0o666)
        let refused = try await eventbus(["tail", "--socket", socket, "--count", "1"], as: outsider, in: directory)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("eventbusd refused: uid \(outsider.userID) is neither root nor in group \(tailGroup.name), which may tail, status and modules"), "\(refused.stderr)")
        #expect(await daemon.waitFor("control: refused subscribe from uid \(outsider.userID) (pid "))
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }

    @Test func theSocketIsExclusiveStaleOnesAreReplacedAndShutdownEndsStreams() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let first = try await DaemonProcessTests.Daemon.running(yaml, in: directory)

        // A second host on the same socket refuses to start.
        let second = try DaemonProcessTests.Daemon(arguments: ["--config", directory.path + "/eventbus.yaml"], in: directory)
        #expect(await second.exitStatus() == 1)
        #expect(second.output.contains("control.socket: another eventbusd is listening on \(socket)"), "\(second.output)")

        // A host that died leaves its socket behind; the next one replaces it.
        first.signal(SIGKILL)
        _ = await first.exitStatus()
        #expect(FileManager.default.fileExists(atPath: socket))
        let notRunning = try await eventbus(["status", "--socket", socket], in: directory)
        #expect(notRunning.stderr.contains("eventbusd is not running (\(socket) does not accept connections)"), "\(notRunning.stderr)")
        let third = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        #expect(third.output.contains("replacing stale control socket \(socket)"))

        // Shutdown: a tail gets the end of its stream, the socket file goes.
        let tail = try CLIProcess(["tail", "--socket", socket, "--exit-on-restart"], in: directory)
        #expect(await waitForTailing(socket, count: 1))
        third.signal(SIGTERM)
        let result = await tail.finish()
        #expect(result.status == 1)
        #expect(result.stderr.contains("eventbusd is shutting down"), "\(result.stderr)")
        #expect(await third.exitStatus() == 0, "\(third.output)")
        #expect(!FileManager.default.fileExists(atPath: socket))
        let gone = try await eventbus(["status", "--socket", socket], in: directory)
        #expect(gone.status == 1)
        #expect(gone.stderr.contains("eventbusd is not running (no socket at \(socket))"), "\(gone.stderr)")
    }

    @Test func reloadAppliesControlSettingsAndSaysWhenARestartIsNeeded() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory, control: "  replay_events: 2")
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        try postMany(socket, name: "user.r", count: 4)

        try directory.write("eventbus.yaml", """
            control:
              socket: \(directory.path)/elsewhere.sock
              replay_events: 10
            """)
        daemon.signal(SIGHUP)
        #expect(await daemon.waitFor("control settings applied"), "\(daemon.output)")
        #expect(daemon.output.contains("control.socket changed from \(socket) to \(directory.path)/elsewhere.sock; the socket moves when eventbusd restarts"))
        try postMany(socket, name: "user.r", count: 4)
        // The ring grew: it kept its last 2 and now holds the 4 new ones too.
        let replay = try await eventbus(["tail", "--socket", socket, "--json", "--last", "10", "--count", "6"], in: directory)
        #expect(replay.jsonLines.map { $0["seq"]?.intValue } == [3, 4, 5, 6, 7, 8], "\(replay.stdout)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }

    /// The host in this process (so the thread sanitizer watches the server's own threads):
    /// tailers, posters and status readers at once, then a shutdown while they stream.
    @Test func manyClientsAtOnceThenShutdownWhileStreaming() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory, control: "  client_buffer: 100000")
        let configPath = try directory.write("eventbus.yaml", yaml)
        let (logger, log) = recordingLogger()
        let host = BusHost(configPath: configPath, logger: logger, control: .configured)
        try await host.start()
        let perPoster = 2_000, posters = 3, tailers = 4
        let tails = try (0..<tailers).map { _ in try rawConnection(socket).0 }
        for tail in tails {
            try tail.send(["op": "subscribe", "patterns": ["many.>"]])
            #expect(try tail.readJSON()?["type"] == "subscribed")
        }
        await withTaskGroup(of: Void.self) { group in
            for poster in 0..<posters {
                group.addTask { try? postMany(socket, name: "many.p\(poster)", count: perPoster, window: 100) }
            }
            group.addTask { for _ in 0..<20 { _ = try? ask(socket, ["op": "status"]) } }
        }
        // Every tailer gets every event, in bus order.
        for tail in tails {
            var last: Int64 = 0
            for _ in 0..<(posters * perPoster) {
                let line = try #require(try tail.readJSON())
                #expect(line["type"] == "event")
                let sequence = line["seq"]?.intValue ?? 0
                #expect(sequence > last)
                last = sequence
            }
        }
        // Shut down with more events in flight: each stream ends with `end` (reason shutdown).
        // The tails are read while the host shuts down, as a real client would: a client that
        // stops reading is one the host may cut off.
        for index in 0..<1_000 { host.bus.post("many.more", fields: ["n": .int(Int64(index))]) }
        // Each connection is read by one task only; the box only carries it there.
        struct Handed<Value>: @unchecked Sendable { let value: Value }
        // Read until each stream ends, off the cooperative threads the shutdown needs.
        let endings = tails.map { Handed(value: $0) }.map { tail in
            Task { try await blocking { () -> JSON? in
                var ending: JSON?
                while let line = try? tail.value.readJSON() {
                    if line["type"] == "end" { ending = line }
                }
                return ending
            } }
        }
        let report = await host.shutdown()
        #expect(report.isClean)
        // On a machine too loaded for a reading thread to keep up within the shutdown's time for
        // clients, the host cuts the slow ones off and logs it (as aSlowReaderAtShutdown… shows);
        // otherwise every stream ends with `end`.
        let forced = log.entries.contains { $0.text.contains("did not take their last lines") }
        for ending in endings {
            let reason = try await ending.value?["reason"]
            #expect(reason == "shutdown" || (forced && reason == nil), "\(log.entries.map(\.text).suffix(5))")
        }
        #expect(!FileManager.default.fileExists(atPath: socket))
    }

    /// `--files`: eventbusd has to have the files source registered on its bus for this; until
    /// the host registers it, the client is told so. When it is registered, the tail sees a
    /// file created in the watched folder.
    @Test func tailFilesOpensASharedFileSourceOnDemand() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory)
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        let watched = directory.path + "/watched"
        try FileManager.default.createDirectory(atPath: watched, withIntermediateDirectories: false)
        let tail = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "1", "--files", watched], in: directory)
        #expect(await eventually { ((try? ask(socket, ["op": "stats"]))?["tailing"]?.arrayValue?.count ?? 0) == 1 })
        // The source arms asynchronously after `subscribed`; a listing of the same watch is
        // answered after it is armed (else the file could be found by the initial scan, silent,
        // and the tail's first event be its fs.closed).
        #expect(try ask(socket, ["op": "listing", "path": .string(watched)])["type"] == "listing")
        try directory.write("watched/new.txt", "hello")
        let result = await tail.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.jsonLines.first?["name"]?.stringValue == "fs.created", "\(result.stdout)")
        #expect(result.jsonLines.first?["fields"]?["path"]?.stringValue == watched + "/new.txt", "\(result.stdout)")

        // A path that does not exist is refused, as `tail -f` refuses it, rather than followed forever.
        let missing = try await eventbus(["tail", "--socket", socket, "--files", watched + "/nothing"], in: directory)
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("\(watched)/nothing does not exist, so there is nothing to watch"), "\(missing.stderr)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0)
    }
}
