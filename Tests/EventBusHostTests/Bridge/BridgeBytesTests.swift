import ControlProtocol
import Foundation
import Testing
import TestSupport

/// The bridge holds events bounded in bytes, not only in count: real eventbusd processes and a
/// real nats-server, large events.
@Suite(.serialized, .enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.realDaemon, .nats), .skippable(.realDaemon, .nats))
struct BridgeBytesTests {
    /// KiB of a /proc/PID/status field: `VmRSS` (resident now), `VmHWM` (the most it ever was).
    static func memoryKiB(_ pid: Int32, _ field: String) -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix(field + ":") } ?? ""
        return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "") ?? -1
    }

    /// Posts `load.big` events n = range, each with a `pad` of `size` bytes, `chunk` lines per write.
    static func postLarge(_ socket: String, _ range: ClosedRange<Int>, size: Int, chunk: Int = 20) throws {
        let pad = String(repeating: "x", count: size)
        let (connection, _) = try rawConnection(socket)
        var rest = range[...]
        while !rest.isEmpty {
            let part = rest.prefix(chunk)
            rest = rest.dropFirst(part.count)
            var bytes: [UInt8] = []
            for n in part { bytes += JSONWriter.line(["op": "post", "name": "load.big", "fields": ["n": .int(Int64(n)), "pad": .string(pad)]]) }
            try connection.send(bytes)
            for _ in part { guard try connection.readJSON()?["type"] == "posted" else { throw POSIXError(.EPROTO) } }
        }
    }

    /// Durable mode, NATS stopped: 300 events of 200 kB posted to a host whose exports may hold
    /// 1 MiB. Five wait, 295 are dropped and announced as `export_overflow` with that count, the
    /// host's memory does not grow by the 60 MB it was sent, and the five are exported once NATS
    /// is back. (Bounded by count only, the export buffer held all 300.)
    @Test func largeExportsWhileNATSIsAwayAreBoundedInBytesAndTheRestGoOutLater() async throws {
        let directory = try TemporaryDirectory("bridge-bytes")
        var server = try NATSServer(storage: directory.path)
        let settings = """
            ping_interval: 500ms
            max_pings_out: 2
            reconnect_wait: 100ms
            max_reconnect_wait: 500ms
            durable: {stream: BYTEBUS, max_age: 1h}
            """
        let a = try BridgedHost("alpha", server: server, in: directory, bridge: """
            export: ["load.>"]
            export_buffer_bytes: 1MiB
            \(settings)
            """, control: "replay_bytes: 1MiB")
        let b = try BridgedHost("beta", server: server, in: directory, bridge: """
            import: ["load.>"]
            \(settings)
            """)
        try await b.start()
        try await a.start()
        #expect(await eventually { b.daemon?.output.contains("importing from stream BYTEBUS") == true })
        let tailA = try TailCollector(a.socket, ["bridge.gap"])
        let tailB = try TailCollector(b.socket, ["load.>", "bridge.gap"])
        try post(a.socket, "load.tick", 1...3)
        #expect(await eventually { tailB.named("load.").count == 3 })
        let pid = try #require(a.daemon?.process.processIdentifier)
        // Warms the paths large events take, one at a time: a published event holds twice its
        // payload until the stream acknowledges it, so on a loaded machine whose
        // acknowledgements lag, five posted at once could overflow the 1 MiB before this test
        // means them to.
        for n in 1...5 {
            try Self.postLarge(a.socket, n...n, size: 200_000)
            #expect(await eventually { tailB.named("load.big").count == n && a.count("export_in_flight") == 0 })
        }
        let before = Self.memoryKiB(pid, "VmRSS")

        let port = server.port
        server.stop()
        #expect(await eventually { a.bridgeStatus?["state"]?.stringValue == "reconnecting" })
        try Self.postLarge(a.socket, 6...305, size: 200_000)
        func overflow() -> Int64 {
            tailA.events.filter { $0["fields"]?["kind"] == "export_overflow" }.reduce(0) { $0 + ($1["fields"]?["dropped"]?.intValue ?? 0) }
        }
        #expect(await eventually { overflow() == 295 }, "announced \(overflow()) dropped; status \(String(describing: a.bridgeStatus))")
        #expect(a.count("export_queued") == 5, "five of 200 kB fit in 1 MiB")
        #expect(a.count("lost") == 295)
        let after = Self.memoryKiB(pid, "VmRSS")
        print("alpha, 300 exports of 200 kB with NATS down and export_buffer_bytes 1 MiB: RSS \(before) KiB → \(after) KiB, \(overflow()) dropped")
        // Held, the 300 events would be 60 MB.
        #expect(after - before < 24_000, "resident \(before) KiB → \(after) KiB")

        server = try NATSServer(storage: directory.path, port: port)
        #expect(await eventually { tailB.named("load.big").count == 10 })
        try await Task.sleep(for: .seconds(1))  // anything more would arrive now
        #expect(tailB.keys("load.big") == (1...10).map { "alpha:\($0)" })
        #expect(tailB.named("bridge.gap").isEmpty)
        #expect(await eventually { a.count("export_queued") == 0 && a.count("export_in_flight") == 0 })
        await a.kill(SIGTERM)
        await b.kill(SIGTERM)
        server.stop()
    }

    /// A host catching up on a stream of large events (100 of 900 kB, stored while it was down)
    /// fetches them a few megabytes at a time: its peak memory grows by a fraction of what it
    /// takes in. (256 per fetch, bounded by count only, was all 90 MB at once — and as much again
    /// decoded.)
    @Test func aHostCatchingUpOnLargeEventsFetchesAFewMegabytesAtATime() async throws {
        let directory = try TemporaryDirectory("bridge-bytes")
        let server = try NATSServer(storage: directory.path)
        defer { server.stop() }
        let settings = "durable: {stream: BIGBUS, max_age: 1h}"
        let a = try BridgedHost("alpha", server: server, in: directory, bridge: "export: [\"load.>\"]\n\(settings)",
                                control: "replay_bytes: 1MiB")
        let b = try BridgedHost("beta", server: server, in: directory, bridge: "import: [\"load.>\"]\n\(settings)",
                                control: "replay_bytes: 1MiB")
        // Beta's first run records its position and its peak memory when idle.
        try await b.start()
        #expect(await eventually { b.daemon?.output.contains("importing from stream BIGBUS") == true })
        try await a.start()
        try post(a.socket, "load.tick", 1...3)
        #expect(await eventually { b.count("imported") == 3 })
        let idlePeak = Self.memoryKiB(try #require(b.daemon?.process.processIdentifier), "VmHWM")
        await b.kill(SIGTERM)

        for part in 0..<5 {
            try Self.postLarge(a.socket, (part * 20 + 1)...(part * 20 + 20), size: 900_000, chunk: 10)
            #expect(await eventually { a.count("exported") == Int64(3 + part * 20 + 20) }, "status \(String(describing: a.bridgeStatus))")
        }
        try await b.start()
        #expect(await eventually { b.count("imported") == 100 }, "status \(String(describing: b.bridgeStatus))")
        let peak = Self.memoryKiB(try #require(b.daemon?.process.processIdentifier), "VmHWM")
        print("beta catching up on 100 events of 900 kB: peak RSS \(idlePeak) KiB idle, \(peak) KiB after")
        #expect(peak - idlePeak < 40_000, "peak \(idlePeak) KiB → \(peak) KiB")
        #expect(b.count("lost") == 0)
        await a.kill(SIGTERM)
        await b.kill(SIGTERM)
    }
}
