import ControlProtocol
import Foundation
import Testing

/// Module workers that stop reading cost the host no threads: each stalled worker's mailbox
/// fills and drops (counted, announced), and no Dispatch thread waits for its socket — a thread
/// that did would make libdispatch start another one, so the host's threads (and the malloc
/// arenas they bring) would grow with every stalled module and every busy moment.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct StalledWorkerThreadsTests {
    typealias Daemon = DaemonProcessTests.Daemon

    /// The threads of process `pid` now (fopen: Foundation reads /proc files as empty).
    private func threads(of pid: Int32) -> Int? {
        guard let file = fopen("/proc/\(pid)/status", "r") else { return nil }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 512)
        while fgets(&line, Int32(line.count), file) != nil {
            let text = line.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
            if text.hasPrefix("Threads:") { return Int(text.dropFirst(8).trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
        return nil
    }

    /// Posts `count` events of about `bytes` bytes each, answers read per window of 200.
    private func postLarge(_ socket: String, count: Int, bytes: Int) throws {
        let (connection, _) = try rawConnection(socket)
        let payload = String(repeating: "x", count: bytes)
        var sent = 0
        while sent < count {
            let batch = min(200, count - sent)
            var lines: [UInt8] = []
            for index in sent..<(sent + batch) {
                lines += JSONWriter.line(["op": "post", "name": "test.item", "fields": ["i": .int(Int64(index)), "p": .string(payload)]])
            }
            try connection.send(lines)
            for _ in 0..<batch {
                guard try connection.readJSON()?["type"]?.stringValue == "posted" else { throw POSIXError(.EPROTO) }
            }
            sent += batch
        }
    }

    @Test func stalledWorkersHoldNoHostThread() async throws {
        let directory = try TemporaryDirectory()
        let socket = directory.path + "/control.sock"
        let stalled = (1...8).map { "s\($0)" }
        // Never killed as hung while the test runs, however loaded the machine.
        let daemon = try await Daemon.running("""
            control: {socket: \(socket)}
            shutdown_timeout: 2s
            modules:
            \(stalled.map { "  \($0):\n    path: \(BuildProducts.fixture("FixtureStalled"))\n    mailbox_capacity: 200\n    worker: {heartbeat_timeout: 600s}" }.joined(separator: "\n"))
            """, in: directory)
        let pid = daemon.process.processIdentifier
        func modules() -> [JSON] { (try? ask(socket, ["op": "modules"]))?["modules"]?.arrayValue ?? [] }

        _ = try ask(socket, ["op": "post", "name": "test.first"])  // every module blocks on it
        #expect(await eventually { modules().count == stalled.count && modules().allSatisfy { ($0["delivered"]?.intValue ?? 0) + ($0["queued"]?.intValue ?? 0) == 1 } },
                "\(modules())")
        // The host at rest: the fewest threads seen over a few seconds (Dispatch lets an idle
        // pool thread go after 5 s), so start-up's passing threads do not count.
        var atRest = Int.max
        for _ in 0..<20 {
            atRest = min(atRest, threads(of: pid) ?? Int.max)
            try await Task.sleep(for: .milliseconds(500))
        }

        // Far more than each worker, its socket, the host's pending frames (2 MB) and the
        // mailbox (200) hold: every mailbox fills, drops and says so.
        try postLarge(socket, count: 4_000, bytes: 2_000)
        for name in stalled {
            #expect(await daemon.waitFor("module \(name) is stalled: its mailbox is full"), "\(name): \(daemon.output)")
        }
        #expect(modules().allSatisfy { ($0["dropped"]?.intValue ?? 0) > 0 }, "\(modules())")

        // With every worker still stalled, the host's threads come back to what they were:
        // none is left waiting for a worker's socket.
        var now = 0
        let settled = await eventually(timeout: patience) {
            now = threads(of: pid) ?? Int.max
            return now <= atRest + 2
        }
        #expect(settled, "threads at rest \(atRest), with \(stalled.count) stalled workers \(now)")

        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }
}
