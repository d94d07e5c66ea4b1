import ArgumentParser
import ControlProtocol
import Glibc

/// `eventbus tail`: follows the running host's events, like `journalctl -f`.
struct TailCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tail",
        abstract: "Follow the events of the running eventbusd.",
        discussion: """
            Patterns use NATS syntax: `*` is one token, `>` the rest (`user.>`, `fs.*`, `>`). \
            Without patterns (and without --files/--journal) every event is shown. Sequence \
            numbers (#N) are bus-wide; `--since N` starts at event N if the host still holds it, \
            and says how many it no longer holds. A tail that does not keep up loses events, and \
            a line says how many.
            """)

    @Argument(help: ArgumentHelp("Event name patterns.", valueName: "pattern"))
    var patterns: [String] = []

    @Flag(help: "One JSON object per line (the control protocol's event and gap lines).")
    var json = false

    @Option(help: ArgumentHelp("Start with event SEQ (inclusive) from the host's replay buffer.", valueName: "seq"))
    var since: Int?

    @Option(help: ArgumentHelp("Start with the last N matching events from the host's replay buffer.", valueName: "n"))
    var last: Int?

    @Option(help: ArgumentHelp("Exit after N events.", valueName: "n"))
    var count: Int?

    @Option(name: .customLong("files"), help: ArgumentHelp("Also show file changes under PATH (the host opens a shared file source for it).", valueName: "path"))
    var files: [String] = []

    @Flag(help: "With --files: watch directories below PATH too.")
    var recursive = false

    @Option(name: .customLong("journal"), help: ArgumentHelp("Also show journal entries of UNIT (the host opens a shared journal source for it).", valueName: "unit"))
    var journal: [String] = []

    @Option(name: .customLong("host"), help: ArgumentHelp("Only events that came from HOST through the NATS bridge (repeatable); 'local' for this host's own.", valueName: "host"))
    var hosts: [String] = []

    @OptionGroup var socket: SocketOptions

    func validate() throws {
        if since != nil && last != nil { throw ValidationError("use --since or --last, not both") }
        if let since, since < 0 { throw ValidationError("--since takes a sequence number (1 or more)") }
        if let last, last < 0 { throw ValidationError("--last takes a count (0 or more)") }
        if let count, count < 1 { throw ValidationError("--count takes a count (1 or more)") }
    }

    func run() throws {
        let host = try socket.connect()
        var request: [String: JSON] = ["op": "subscribe", "id": "tail"]
        if !patterns.isEmpty { request["patterns"] = .array(patterns.map { .string($0) }) }
        if let since { request["since_seq"] = .int(Int64(since)) }
        if let last { request["last"] = .int(Int64(last)) }
        if let count { request["count"] = .int(Int64(count)) }
        if !files.isEmpty { request["files"] = .array(files.map { .string($0) }) }
        if recursive { request["recursive"] = .bool(true) }
        if !journal.isEmpty { request["journal"] = .array(journal.map { .string($0) }) }
        if !hosts.isEmpty { request["hosts"] = .array(hosts.map { .string($0) }) }
        _ = try host.request(.object(request))
        try follow(host.connection)
    }

    /// Copies the stream to standard output until the host ends it.
    ///
    /// In `--json` mode event and gap lines are passed through byte for byte, recognized by
    /// their first bytes only — no parsing — and written in one `write` per chunk received, so
    /// the tail keeps up with the host. Other lines (`end`, `error`) are parsed.
    private func follow(_ connection: ControlConnection) throws {
        var output = StandardOutput()
        let formatter = EventFormatter(colour: EventFormatter.wantsColour())
        var ending: String?
        try connection.forEachLine(beforeWaiting: { output.flush() }) { line in
            if line.starts(with: Self.eventPrefix) || line.starts(with: Self.gapPrefix) {
                if json {
                    output.append(line)
                    output.append(0x0A)
                } else if let value = try? JSON.parse(line) {
                    output.append(formatter.format(value))
                }
                if output.count >= 1 << 16 { output.flush() }
                return true
            }
            let value = try JSON.parse(line)
            switch value["type"]?.stringValue {
            case "end":
                ending = value["reason"]?.stringValue ?? "end"
                return false
            case "error":
                output.flush()
                printError("eventbusd: \(value["message"]?.stringValue ?? "error")")
            default:
                break  // a line type this tail does not know: newer hosts may add some
            }
            return true
        }
        output.flush()
        switch ending {
        case "count": return
        case "shutdown": throw CommandError("eventbusd is shutting down")
        case let reason?: throw CommandError("eventbusd ended the stream (\(reason))")
        case nil: throw CommandError("eventbusd closed the connection")
        }
    }

    private static let eventPrefix = Array(#"{"type":"event""#.utf8)
    private static let gapPrefix = Array(#"{"type":"gap""#.utf8)
}

/// Standard output, buffered by hand: one `write` per batch of lines.
struct StandardOutput {
    private var buffer: [UInt8] = []

    var count: Int { buffer.count }

    mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) { buffer.append(contentsOf: bytes) }
    mutating func append(_ byte: UInt8) { buffer.append(byte) }
    mutating func append(_ text: String) { buffer.append(contentsOf: text.utf8) }

    mutating func flush() {
        var offset = 0
        while offset < buffer.count {
            let written = buffer.withUnsafeBytes { write(STDOUT_FILENO, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                exit(errno == EPIPE ? 0 : 1)  // the reader went away (`| head`): done
            }
            offset += written
        }
        buffer.removeAll(keepingCapacity: true)
    }
}

func printError(_ message: String) {
    var line = message + "\n"
    line.withUTF8 { _ = write(STDERR_FILENO, $0.baseAddress, $0.count) }
}
