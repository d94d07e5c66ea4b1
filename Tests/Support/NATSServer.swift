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
        self.port = try port ?? Self.freePort()
        url = "nats://\(address):\(self.port)"
        logPath = storage + "/nats-server-\(self.port).log"
        FileManager.default.createFile(atPath: logPath, contents: nil)
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
        let deadline = Date(timeIntervalSinceNow: 30)
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

    /// A loopback TCP port nobody listens on: bind port 0, read it back, close.
    public static func freePort() throws -> Int {
        try freePorts(1)[0]
    }

    /// `count` different loopback TCP ports nobody listens on. Each is held bound until all are
    /// picked: closed at once, the kernel may hand the same port out again (a cluster's client
    /// port came back as another server's route port, which then could not listen).
    public static func freePorts(_ count: Int) throws -> [Int] {
        var descriptors: [Int32] = []
        defer { descriptors.forEach { close($0) } }
        return try (0..<count).map { _ in try boundPort(keeping: &descriptors) }
    }

    /// Binds a socket to a loopback port the kernel picks; returns the port, keeps the socket.
    private static func boundPort(keeping descriptors: inout [Int32]) throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        descriptors.append(fd)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}
