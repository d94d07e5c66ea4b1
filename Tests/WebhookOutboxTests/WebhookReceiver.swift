import Foundation
import TestSupport

/// The real HTTP receiver the outbox tests post to: `Tests/Fixtures/webhook-receiver/receiver.py`
/// (Python's ThreadingHTTPServer) as a child process on a loopback port, recording every request
/// in a file the test reads back. Stopped by its pid (SIGKILL) at deinit.
final class WebhookReceiver: @unchecked Sendable {
    // @unchecked: `process` is only started in init and killed at deinit or `stop()`.
    struct Request: Decodable, Sendable {
        var key: String?
        var method: String
        var path: String
        var body: String
        var headers: [[String]]
        /// The how-manieth request with this key and path, counted by the receiver.
        var attempt: Int

        func headers(named name: String) -> [String] {
            headers.filter { $0.first?.lowercased() == name.lowercased() }.map { $0.last ?? "" }
        }
    }

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/webhook-receiver/receiver.py").path

    let port: Int
    private let log: String
    private let process = Process()

    /// Starts the receiver on `port` (any free one when nil) and waits until it listens.
    init(in folder: TemporaryDirectory, port: Int? = nil) async throws {
        let name = "receiver-\(UUID().uuidString)"
        log = folder.at(name + ".log")
        let ready = folder.at(name + ".port")
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [Self.script, "--log", log, "--ready", ready] + (port.map { ["--port", String($0)] } ?? [])
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let process = process
        guard await eventually({ !process.isRunning || FileManager.default.fileExists(atPath: ready) }), process.isRunning,
              let text = try? String(contentsOfFile: ready, encoding: .utf8), let bound = Int(text) else {
            throw DidNotStart(description: "the webhook receiver did not start (python3 \(Self.script))")
        }
        self.port = bound
    }

    struct DidNotStart: Error, CustomStringConvertible {
        var description: String
    }

    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    /// Every request so far, in arrival order (a line still being written is left for later).
    var requests: [Request] {
        guard let data = FileManager.default.contents(atPath: log) else { return [] }
        return data.split(separator: UInt8(ascii: "\n")).compactMap { try? JSONDecoder().decode(Request.self, from: Data($0)) }
    }

    /// The requests that carried `key`.
    func requests(key: String) -> [Request] { requests.filter { $0.key == key } }

    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    deinit { stop() }
}
