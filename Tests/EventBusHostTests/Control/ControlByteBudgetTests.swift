import ControlProtocol
import EventBusKit
import Foundation
import Testing
@testable import EventBusHost

/// The byte budgets of the replay ring (`control.replay_bytes`) and of each client's buffer
/// (`control.client_buffer_bytes`), against the real eventbusd as a child process: counting
/// events alone let 1000 posts of 900 KB take the host from 32 MB to 938 MB. Every wait is for a
/// condition, bounded only to fail a broken test; memory is read from /proc.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct ControlByteBudgetTests {
    @Test func theReplayRingHoldsOnlyTheNewestEventsThatFitItsBytes() async throws {
        let directory = try TemporaryDirectory()
        let (yaml, socket) = controlConfig(directory, control: "  replay_bytes: 1MiB")
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        // 50 events of 100 000 bytes (plus under 300 of name, key and overhead each): 10 fit in
        // 1 MiB (1 003 000 bytes), 11 do not (1 103 300).
        let sequences = try await blocking { try postLarge(socket, name: "big.item", count: 50, bytes: 100_000) }
        #expect(sequences.count == 50)

        let last = try await eventbus(["tail", "--socket", socket, "--json", "--last", "50", "--no-follow", "big.>"], in: directory)
        #expect(last.status == 0, "\(last.stderr)")
        let replayed = last.jsonLines.filter { $0["type"] == "event" }.compactMap { $0["seq"]?.intValue }
        #expect(replayed == Array(sequences.suffix(10)), "replayed \(replayed)")
        #expect(last.jsonLines.allSatisfy { $0["type"] != "gap" }, "a --last replay gives what is held, no gap line")

        // What the ring no longer holds is said as for an event count: `oldest_seq` in the answer, and a
        // `replay` gap line for a `since_seq` before it.
        let (connection, _) = try rawConnection(socket)
        try connection.send(["op": "subscribe", "patterns": ["big.>"], "since_seq": .int(sequences[0]), "follow": .bool(false)])
        let answer = try #require(try connection.readJSON())
        #expect(answer["oldest_seq"]?.intValue == sequences[40], "\(answer)")
        let gap = try #require(try connection.readJSON())
        #expect(gap == ["type": "gap", "reason": "replay", "dropped": .int(40), "first_seq": .int(sequences[0]), "last_seq": .int(sequences[39])])

        let replay = try #require(try ask(socket, ["op": "status"])["control"]?["replay"])
        #expect(replay["held"]?.intValue == 10)
        #expect(replay["byte_capacity"]?.intValue == 1 << 20)
        #expect((replay["bytes"]?.intValue ?? .max) <= 1 << 20, "\(replay)")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func aStalledClientOverItsByteBudgetGetsCountedGapsWhileAFastClientGetsEverything() async throws {
        let directory = try TemporaryDirectory()
        // The count bound (10 000) is far above the 400 events posted: only bytes can drop.
        let (yaml, socket) = controlConfig(directory, control: "  client_buffer_bytes: 256KiB")
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        let total = 400, window = 10, size = 10_000

        let (stalled, _) = try rawConnection(socket)
        try stalled.send(["op": "subscribe", "patterns": ["budget.>"]])
        let subscribed = try #require(try stalled.readJSON())
        #expect(subscribed["buffer_bytes"]?.intValue == 256 << 10, "\(subscribed)")
        let fast = try CLIProcess(["tail", "--socket", socket, "--json", "--count", "\(total)", "budget.>"], in: directory)
        #expect(await waitForTailing(socket, count: 2))
        let fastPID = Int64(fast.process.processIdentifier)

        // Windows of 100 KB: the fast client has taken each before the next is posted, so its
        // 256 KiB are never exceeded; the stalled one takes nothing.
        for posted in stride(from: window, through: total, by: window) {
            _ = try await blocking { try postLarge(socket, name: "budget.item", count: window, bytes: size) }
            guard posted < total else { break }  // after the last, the fast client has ended
            #expect(await eventually { delivered(socket, pid: fastPID) == posted }, "fast client at \(delivered(socket, pid: fastPID)) of \(posted)")
        }
        let result = await fast.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.jsonLines.filter { $0["type"] == "event" }.count == total)
        #expect(!result.stdout.contains("\"gap\""))

        let feed = try #require(try ask(socket, ["op": "stats"])["tailing"]?.arrayValue?.first { $0["pid"]?.intValue != fastPID })
        #expect((feed["queued_bytes"]?.intValue ?? .max) <= 256 << 10, "\(feed)")
        let dropped = Int(feed["dropped"]?.intValue ?? 0)
        // Not counted in the buffer: what the socket's kernel buffer and the session's one
        // output batch took before it stopped. Most of 4 MB must have dropped.
        #expect(dropped >= total / 2, "\(feed)")

        // It reads now: every event is in its stream or in a slow_client gap, and the gaps add
        // up to what the host counted.
        struct Handed: @unchecked Sendable { let connection: ControlConnection }
        let reader = Handed(connection: stalled)
        let lines = try await blocking { () -> [JSON] in
            var lines: [JSON] = []
            var covered = 0
            while covered < total, let line = try reader.connection.readJSON() {
                lines.append(line)
                if line["type"] == "event" { covered += 1 }
                if line["type"] == "gap" { covered += Int(line["dropped"]?.intValue ?? 0) }
            }
            return lines
        }
        let events = lines.filter { $0["type"] == "event" }
        let gaps = lines.filter { $0["type"] == "gap" }
        #expect(gaps.allSatisfy { $0["reason"] == "slow_client" }, "\(gaps)")
        #expect(gaps.reduce(0) { $0 + Int($1["dropped"]?.intValue ?? 0) } == dropped)
        #expect(events.count + dropped == total)
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func memoryStaysWithinTheBudgetsUnderLargeEventsAndComesBackAfterTheClientsLeave() async throws {
        let directory = try TemporaryDirectory()
        let replayBytes = 8 << 20, clientBytes = 4 << 20, stalledClients = 4
        let (yaml, socket) = controlConfig(directory, control: "  replay_bytes: 8MiB\n  client_buffer_bytes: 4MiB")
        let daemon = try await DaemonProcessTests.Daemon.running(yaml, in: directory)
        let pid = daemon.process.processIdentifier
        // Warm up: the allocator's arenas, the post path's buffers, a line of 900 KB parsed once.
        _ = try await blocking { try postLarge(socket, name: "warm.item", count: 5, bytes: 900_000) }
        let baseline = try #require(ProcessProbe(pid: pid)).residentKiB

        var stalled: [ControlConnection] = []
        for _ in 0..<stalledClients {
            let (connection, _) = try rawConnection(socket)
            try connection.send(["op": "subscribe", "patterns": ["rss.>"]])
            #expect(try connection.readJSON()?["type"] == "subscribed")
            stalled.append(connection)
        }
        _ = try await blocking { try postLarge(socket, name: "rss.item", count: 200, bytes: 900_000) }
        let during = try #require(ProcessProbe(pid: pid)).residentKiB
        // Held at most: the ring, each stalled client's buffer, and what each session took for
        // its socket (one batch: up to 256 KiB and one event, encoded); 32 MiB for the rest (the
        // post connection's line, allocator slack). Without the budgets: 180 MB and more.
        let sessions = stalledClients * (256 << 10 + 1 << 20)
        let bound = (replayBytes + stalledClients * clientBytes + sessions + 32 << 20) >> 10
        #expect(during - baseline <= bound, "RSS \(baseline) KiB -> \(during) KiB with \(stalledClients) stalled clients; bound +\(bound) KiB")

        // The clients go and the ring turns over to small events: the large ones are freed.
        stalled.removeAll()
        #expect(await eventually { ((try? ask(socket, ["op": "stats"]))?["tailing"]?.arrayValue?.count ?? -1) == 0 })
        try await blocking { try postMany(socket, name: "rss.small", count: 10_000) }
        let after = try #require(ProcessProbe(pid: pid)).residentKiB
        #expect(after - baseline <= 16 << 10, "RSS \(baseline) KiB -> \(during) KiB -> \(after) KiB after the clients left")
        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }

    @Test func byteSettingsTakeSizesAndBadOnesNameFileAndLine() throws {
        let config = try HostConfig.parse("""
            control:
              replay_bytes: 64MiB
              client_buffer_bytes: 16 MB
            """, file: "e.yaml", directory: "/etc/eventbus")
        #expect(config.control.replayBytes == 64 << 20)
        #expect(config.control.clientBufferBytes == 16 << 20)
        #expect(try HostConfig.parse("control:\n  replay_bytes: 1048576\n  client_buffer_bytes: 512K\n", file: "e.yaml", directory: "/")
            .control.clientBufferBytes == 512 << 10)
        let defaults = try HostConfig.parse("", file: "e.yaml", directory: "/").control
        #expect(defaults.replayBytes == ControlSettings.defaultReplayBytes && defaults.clientBufferBytes == ControlSettings.defaultClientBufferBytes)

        func error(_ yaml: String) -> String {
            do { _ = try HostConfig.parse(yaml, file: "e.yaml", directory: "/"); return "no error" } catch { return error.description }
        }
        #expect(error("control:\n  socket: /x\n  replay_bytes: lots\n") == "e.yaml:3: control.replay_bytes: expected a size such as 64MiB, 16 MB or 1048576 (bytes), found \"lots\"")
        #expect(error("control:\n  client_buffer_bytes: 0\n") == "e.yaml:2: control.client_buffer_bytes: must be at least 1B, found 0")
        #expect(error("control:\n  client_buffer_bytes: -5\n").hasPrefix("e.yaml:2: control.client_buffer_bytes: expected a size"))
        #expect(error("control:\n  replay_bytes: 5XiB\n").hasPrefix("e.yaml:2: control.replay_bytes: expected a size"))
        #expect(error("control:\n  replay_bytes: 99999999999T\n").hasPrefix("e.yaml:2: control.replay_bytes: expected a size"))
    }
}

/// Posts `count` events named `name`, each with a string field of `bytes` bytes, one at a time
/// over one connection; returns their sequence numbers.
private func postLarge(_ socket: String, name: String, count: Int, bytes: Int) throws -> [Int64] {
    let (connection, _) = try rawConnection(socket)
    let blob = JSON.string(String(repeating: "x", count: bytes))
    var sequences: [Int64] = []
    for _ in 0..<count {
        try connection.send(["op": "post", "name": .string(name), "fields": ["blob": blob]])
        guard let answer = try connection.readJSON(), answer["type"] == "posted", let sequence = answer["seq"]?.intValue else {
            throw POSIXError(.EPROTO)
        }
        sequences.append(sequence)
    }
    return sequences
}

/// Events the host wrote to the tailing client of process `pid`, from `stats`.
private func delivered(_ socket: String, pid: Int64) -> Int {
    let feeds = (try? ask(socket, ["op": "stats"]))?["tailing"]?.arrayValue ?? []
    return Int(feeds.first { $0["pid"]?.intValue == pid }?["delivered"]?.intValue ?? -1)
}
