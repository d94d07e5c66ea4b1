import ControlProtocol
import Foundation
import Testing
import TestSupport

/// A real eventbusd whose NATS server hangs (SIGSTOP) while it exports more than the sockets
/// take in: the control socket's `status` answers meanwhile, the bridge finds the connection
/// down by its write deadline, and SIGTERM ends the host with the server still frozen.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.realDaemon, .nats), .skippable(.realDaemon, .nats))
struct BridgeHungServerDaemonTests {
    @Test func statusAnswersAndTheHostStopsWhileTheServerHangs() async throws {
        let directory = try TemporaryDirectory("bridge-hung-daemon")
        let server = try NATSServer(storage: directory.path)
        defer { server.stop() }
        let a = try BridgedHost("alpha", server: server, in: directory, bridge: "export: [\"load.>\"]\nmax_reconnect_wait: 1s")
        try await a.start()
        server.suspend()
        defer { server.resume() }  // before the daemon is killed: a host stuck on the server ends then
        defer { if let daemon = a.daemon, daemon.process.isRunning { daemon.signal(SIGKILL) } }
        // 400 events of 50 kB, far more than the sockets to the frozen server take in.
        let (connection, _) = try rawConnection(a.socket)
        let pad = String(repeating: "x", count: 50_000)
        for chunk in 0..<4 {
            var bytes: [UInt8] = []
            for n in 0..<100 {
                bytes += JSONWriter.line(["op": "post", "name": "load.big", "fields": ["n": .int(Int64(chunk * 100 + n)), "pad": .string(pad)]])
            }
            try connection.send(bytes)
            for _ in 0..<100 { guard try connection.readJSON()?["type"] == "posted" else { throw POSIXError(.EPROTO) } }
        }
        // The exporter is stuck in its write now; `status` answers all the same, every time. The
        // server stays frozen until the end, so an answer at all shows that status does not wait
        // for it; how fast it comes is the machine's business.
        let socket = a.socket
        for _ in 0..<10 {
            let answer = Collected<JSON?>(nil)
            let answered = within(patience) { answer.update { $0 = (try? ask(socket, ["op": "status"]))?["bridge"] } }
            #expect(answered, "status did not answer with the server frozen")
            guard answered else { break }
            #expect(answer.value?["host"] == "alpha")
            try await Task.sleep(for: .milliseconds(300))
        }
        // The write deadline breaks the connection: status says so, the server still frozen.
        #expect(await eventually {
            let answer = Collected<String?>(nil)
            return within(patience) { answer.update { $0 = (try? ask(socket, ["op": "status"]))?["bridge"]?["state"]?.stringValue } }
                && answer.value == "reconnecting"
        })
        // And the host stops with the server still frozen.
        let daemon = try #require(a.daemon)
        daemon.signal(SIGTERM)
        #expect(await eventually { !daemon.process.isRunning },
                "eventbusd did not exit within 30 s of SIGTERM with the server frozen:\n\(daemon.output.suffix(3000))")
        #expect(!daemon.process.isRunning && daemon.process.terminationStatus == 0)
    }
}

/// Runs `body` on a thread of its own and waits for it at most `bound`: whether it ended. A body
/// that did not goes on running, so callers make sure it can end (the server resumes). The
/// server never resumes before `body` ends, so `bound` only ends a broken test.
private func within(_ bound: Duration, _ body: @escaping @Sendable () -> Void) -> Bool {
    let done = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
        body()
        done.signal()
    }
    return done.wait(timeout: .now() + .milliseconds(Int(bound.components.seconds * 1_000))) == .success
}
