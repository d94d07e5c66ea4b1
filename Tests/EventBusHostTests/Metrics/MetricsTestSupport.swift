import ControlProtocol
import Foundation

/// A TCP connection to a loopback port, with reads bounded by the suite's patience (for broken tests only).
final class LoopbackConnection {
    let fd: Int32

    init(port: UInt16) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let code = errno
            close(fd)
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .ECONNREFUSED)
        }
        // A read waits as long as the suite waits for anything: a loaded machine's listener,
        // serving a flood of slow clients beside the scraper, has answered after 61 s.
        var timeout = timeval(tv_sec: patienceSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ text: String) { send(bytes: Array(text.utf8)) }

    func send(bytes: [UInt8]) {
        var bytes = bytes
        _ = Foundation.send(fd, &bytes, bytes.count, Int32(MSG_NOSIGNAL))
    }

    /// Whether something (bytes, or the server's close) can be read within `timeout`.
    func isReadable(within timeout: Duration) -> Bool {
        var pollFD = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let (seconds, attoseconds) = timeout.components
        return poll(&pollFD, 1, Int32(seconds * 1000 + attoseconds / 1_000_000_000_000_000)) == 1
    }

    /// Everything until the server closes.
    func readToEnd() -> String {
        var all: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            all += buffer[0..<count]
        }
        return String(decoding: all, as: UTF8.self)
    }
}

/// One HTTP exchange with a loopback port: sends `request` as is, returns the whole answer.
func http(_ port: UInt16, _ request: String) throws -> String {
    let connection = try LoopbackConnection(port: port)
    connection.send(request)
    return connection.readToEnd()
}

/// The value of the first sample line `series value` in a Prometheus text, `series` written
/// exactly (name and labels) as the host writes it.
func sampleValue(_ text: String, _ series: String) -> Double? {
    for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
        return Double(line.dropFirst(series.count + 1))
    }
    return nil
}

/// A real Prometheus (Debian's `prometheus` package, which `.ci/setup` installs) with a config
/// of the test's, on a free loopback port, its data and log in `directory`; stopped at deinit.
final class PrometheusServer {
    static let path = "/usr/bin/prometheus"
    static var isInstalled: Bool { FileManager.default.isExecutableFile(atPath: path) }

    let port: UInt16
    let logPath: String
    private let process = Process()

    init(config yaml: String, in directory: TemporaryDirectory) throws {
        port = UInt16(try freeLoopbackPort())
        let config = try directory.write("prometheus-\(port).yml", yaml)
        logPath = try directory.write("prometheus-\(port).log", "")
        process.executableURL = URL(fileURLWithPath: Self.path)
        process.arguments = ["--config.file=\(config)", "--storage.tsdb.path=\(directory.path)/tsdb-\(port)",
                             "--web.listen-address=127.0.0.1:\(port)"]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardError = process.standardOutput
        try process.run()
    }

    deinit {
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// The JSON body of a GET of its HTTP API (`/api/v1/…`), nil while it does not answer.
    func get(_ path: String) -> JSON? {
        guard let answer = try? http(port, "GET \(path) HTTP/1.0\r\n\r\n"),
              let body = answer.range(of: "\r\n\r\n").map({ answer[$0.upperBound...] }) else { return nil }
        return try? JSON.parse(String(body))
    }

    /// The answer to an instant query: `status` and `data`, or `error`.
    func query(_ query: String) -> JSON? {
        get("/api/v1/query?query=\(query.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)")
    }

    /// The value of the first series an instant query gives now (nil: no such series yet).
    func value(_ query: String) -> String? {
        self.query(query)?["data"]?["result"]?.arrayValue?.first?["value"]?.arrayValue?.last?.stringValue
    }
}
