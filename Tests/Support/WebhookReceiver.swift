import Foundation

/// The real HTTP receiver webhook tests post to (the outbox's and the rules'): `Tests/Fixtures/webhook-receiver/receiver.py`
/// (Python's ThreadingHTTPServer) as a child process on a loopback port, recording every request
/// in a file the test reads back. Stopped by its pid (SIGKILL) at deinit.
public final class WebhookReceiver: @unchecked Sendable {
    // @unchecked: `process` is only started in init and killed at deinit or `stop()`.
    public struct Request: Decodable, Sendable {
        public var key: String?
        public var method: String
        public var path: String
        public var body: String
        public var headers: [[String]]
        /// The how-manieth request with this key and path, counted by the receiver.
        public var attempt: Int

        public func headers(named name: String) -> [String] {
            headers.filter { $0.first?.lowercased() == name.lowercased() }.map { $0.last ?? "" }
        }
    }

    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/webhook-receiver/receiver.py").path

    public let port: Int
    private let log: String
    private let process = Process()

    /// Starts the receiver on `port` (any free one when nil) and waits until it listens.
    public init(in folder: TemporaryDirectory, port: Int? = nil) async throws {
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

    public struct DidNotStart: Error, CustomStringConvertible {
        public var description: String
    }

    public func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    /// Every request so far, in arrival order (a line still being written is left for later).
    public var requests: [Request] {
        guard let data = FileManager.default.contents(atPath: log) else { return [] }
        return data.split(separator: UInt8(ascii: "\n")).compactMap { try? JSONDecoder().decode(Request.self, from: Data($0)) }
    }

    /// The requests that carried `key`.
    public func requests(key: String) -> [Request] { requests.filter { $0.key == key } }

    public func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    deinit { stop() }
}
