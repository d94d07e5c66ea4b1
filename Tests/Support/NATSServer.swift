import Foundation

/// A real `nats-server` (Debian's, with JetStream) on a free loopback port, its storage in a
/// folder the test owns; started by the test, stopped by its pid.
public final class NATSServer: @unchecked Sendable {
    public static let executable: String? = ["/usr/sbin/nats-server", "/usr/bin/nats-server"].first { (path: String) in access(path, X_OK) == 0 }
    /// Whether tests that need a server can run; they are skipped (saying why) otherwise.
    public static var isInstalled: Bool { executable != nil }

    public let port: Int
    public let url: String
    private let process = Process()
    private let logPath: String

    /// Starts the server and waits until it accepts clients. `configuration` (nats-server's
    /// config syntax) is for what has no command-line flag: JetStream domains, leaf nodes.
    ///
    /// `wrapper` runs the server through another command (`ip netns exec NAME`), listening on
    /// `address`.
    public init(storage: String, port: Int? = nil, configuration: String? = nil,
                wrapper: [String] = [], address: String = "127.0.0.1") throws {
        guard let executable = Self.executable else { throw POSIXError(.ENOENT) }
        self.port = try port ?? freeLoopbackPort()
        url = "nats://\(address):\(self.port)"
        logPath = storage + "/nats-server-\(self.port).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)  // opening it next says why, if it failed
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        let command = wrapper + [executable, "-js", "-sd", storage + "/jetstream", "-a", address, "-p", String(self.port)]
        process.executableURL = URL(fileURLWithPath: command[0])
        process.arguments = Array(command.dropFirst())
        if let configuration {
            let file = storage + "/nats-server-\(self.port).conf"
            try configuration.write(toFile: file, atomically: true, encoding: .utf8)
            process.arguments! += ["-c", file]
        }
        process.standardOutput = log
        process.standardError = log
        try process.run()
        try log.close()
        let deadline = Date(timeIntervalSinceNow: Double(patienceSeconds))
        while !output.contains("Server is ready") {
            guard process.isRunning, Date() < deadline else { throw POSIXError(.ETIMEDOUT) }
            usleep(20_000)
        }
    }

    public var pid: Int32 { process.processIdentifier }
    public var output: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Freezes the server (SIGSTOP): connections stay open but nothing moves — what a hung
    /// server or a black-holed link looks like to clients.
    public func suspend() { kill(pid, SIGSTOP) }
    public func resume() { kill(pid, SIGCONT) }

    /// SIGKILL — a server that dies at an instant, with whatever it had not written — then waits
    /// for it to exit.
    public func sigkill() {
        guard process.isRunning else { return }
        kill(pid, SIGKILL)
        process.waitUntilExit()
    }

    /// SIGTERM, then waits for it to exit.
    public func stop() {
        guard process.isRunning else { return }
        kill(pid, SIGCONT)
        kill(pid, SIGTERM)
        process.waitUntilExit()
    }

    deinit {
        if process.isRunning {
            kill(pid, SIGCONT)
            kill(pid, SIGKILL)
            process.waitUntilExit()
        }
    }
}
