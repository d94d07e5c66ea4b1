import Dispatch
@_spi(EventBusHost) import EventBusKit
import Glibc

/// Sends entries to systemd-journald with its native protocol: one datagram of fields per
/// entry to `/run/systemd/journal/socket`, or — for an entry too large for one datagram — a
/// sealed memory file holding it, passed over the socket.
///
/// Why not libsystemd's `sd_journal_sendv`: it blocks the caller while journald's queue is full
/// (here `net.unix.max_dgram_qlen` is 10 datagrams, so a burst of log lines fills it at once),
/// it reports success when no journald listens at all (docs/platform-facts.md, The journal: silent loss), and its
/// socket path is fixed, so tests could not point it at a private journald.
///
/// ## Never blocking the caller
/// A write tries one non-blocking send on the caller's thread. When journald's queue is full,
/// the entry goes to a bounded backlog instead, and the *writer queue* (one Dispatch thread,
/// `eventbus.journald.writer`) sends the backlog, waiting for room as long as journald needs.
/// While a backlog exists, later writes join it, so each thread's entries reach the journal in
/// the order it wrote them. A full backlog drops the newest entries and counts them; the count
/// is written to the journal (a warning) when the backlog has drained: loss is never silent.
/// An entry journald does not take at all (journald gone) is written to standard error instead,
/// with a `<priority>` prefix that journald's stream reader understands.
public final class JournaldWriter: Sendable {
    /// Where journald listens for native-protocol datagrams on every systemd system.
    public static let defaultSocketPath = "/run/systemd/journal/socket"
    /// Overrides ``defaultSocketPath``: for tests against a private journald, and for
    /// containers where the host's journald socket is mounted elsewhere.
    public static let socketPathVariable = "EVENTBUS_JOURNAL_SOCKET"

    public let socketPath: String
    /// `SYSLOG_IDENTIFIER` of the entries the writer makes itself (the drop notice).
    public let identifier: String
    private let address: System.UnixAddress
    private let fd: Int32
    private let backlogLimit: Int
    private let queue = DispatchQueue(label: "eventbus.journald.writer")

    /// An encoded entry and what to print if journald cannot take it.
    struct Entry: Sendable {
        var datagram: [UInt8]
        var priority: Int
        var message: String
    }

    private struct State {
        var backlog: [Entry] = []
        /// The writer queue is sending (or about to send) the backlog.
        var draining = false
        var dropped = 0
    }

    private let state = Locked(State())

    /// Checks that journald listens at `socketPath` (throws if not: the caller logs elsewhere).
    /// - Parameter backlogLimit: entries held while journald's queue is full, before dropping.
    public init(socketPath: String = defaultSocketPath, identifier: String, backlogLimit: Int = 10_000) throws {
        guard let address = System.UnixAddress(socketPath) else {
            throw System.CallError(call: "socket address", path: socketPath, errno: ENAMETOOLONG)
        }
        try System.probeDatagramReceiver(address)
        // 8 MiB, as libsystemd asks: the largest entry that still goes as a plain datagram.
        fd = try System.datagramSocket(sendTimeout: .seconds(1), sendBufferSize: 8 << 20)
        self.address = address
        self.socketPath = socketPath
        self.identifier = identifier
        self.backlogLimit = backlogLimit
    }

    deinit { System.close(fd) }

    /// Sends `fields` as one entry; never blocks (see the type's notes). Any thread.
    /// `priority` and `message` are only for the standard-error fallback.
    func write(fields: [(name: String, value: String)], priority: Int, message: String) {
        write(Entry(datagram: Self.encode(fields), priority: priority, message: message))
    }

    func write(_ entry: Entry) {
        let sendNow = state.withLock { state in
            guard state.draining else { return true }
            enqueue(entry, &state)
            return false
        }
        guard sendNow, deliver(entry, wait: false) == .wouldBlock else { return }
        let startDraining = state.withLock { state in
            enqueue(entry, &state)
            defer { state.draining = true }
            return !state.draining
        }
        if startDraining { queue.async { self.drain() } }
    }

    /// Waits, at most `timeout`, until the backlog has reached journald: at exit, so the last
    /// lines (the shutdown report) are not lost with the process. Returns whether it did.
    @discardableResult
    public func flush(timeout: Duration) -> Bool {
        let done = DispatchSemaphore(value: 0)
        // The writer queue runs a drain until the backlog is empty, so this runs after it.
        queue.async { done.signal() }
        return done.wait(timeout: .now() + DispatchTimeInterval(timeout)) == .success
    }

    private func enqueue(_ entry: Entry, _ state: inout State) {
        if state.backlog.count < backlogLimit {
            state.backlog.append(entry)
        } else {
            state.dropped += 1
        }
    }

    /// On the writer queue: sends the backlog, batch by batch, until it is empty. The drop
    /// notice goes after the batch that was queued before the drops.
    private func drain() {
        while true {
            let batch: [Entry]? = state.withLock { state in
                guard !state.backlog.isEmpty else {
                    state.draining = false
                    return nil
                }
                var batch = state.backlog
                state.backlog.removeAll(keepingCapacity: true)
                if state.dropped > 0 {
                    batch.append(dropNotice(count: state.dropped))
                    state.dropped = 0
                }
                return batch
            }
            guard let batch else { return }
            for entry in batch {
                // Each wait is bounded by the socket's send timeout; journald may just be busy.
                while deliver(entry, wait: true) == .wouldBlock {}
            }
        }
    }

    private func dropNotice(count: Int) -> Entry {
        let message = "journald did not keep up: \(count) log message(s) dropped (backlog of \(backlogLimit) full)"
        return Entry(datagram: Self.encode([("MESSAGE", message), ("PRIORITY", "4"), ("SYSLOG_IDENTIFIER", identifier)]),
                     priority: 4, message: message)
    }

    private enum Delivery: Equatable {
        case done
        case wouldBlock
    }

    /// One attempt: the datagram, or a sealed memory file if it is too large for one; standard
    /// error if journald refuses both.
    private func deliver(_ entry: Entry, wait: Bool) -> Delivery {
        var outcome = entry.datagram.withUnsafeBytes { System.sendDatagram($0, to: address, on: fd, wait: wait) }
        if outcome == .tooLarge {
            outcome = sendAsMemoryFile(entry, wait: wait)
        }
        switch outcome {
        case .sent: return .done
        case .wouldBlock: return .wouldBlock
        case .tooLarge, .failed:
            System.writeToStandardError("<\(entry.priority)>\(entry.message.replacing("\n", with: " "))\n")
            return .done
        }
    }

    /// journald's path for large entries (as libsystemd's): the entry in a sealed memfd, and an
    /// empty datagram carrying its descriptor.
    private func sendAsMemoryFile(_ entry: Entry, wait: Bool) -> System.SendOutcome {
        let created = entry.datagram.withUnsafeBytes { bytes in
            Result { () throws(System.CallError) in try System.sealedMemoryFile(named: "journal-entry", containing: bytes) }
        }
        let file: Int32
        switch created {
        case .success(let descriptor): file = descriptor
        case .failure(let error): return .failed(errno: error.errno)
        }
        defer { System.close(file) }
        return System.sendDatagram(UnsafeRawBufferPointer(start: nil, count: 0), to: address, on: fd,
                                   wait: wait, passing: file)
    }

    /// journald's native format: `NAME=value\n` per field; a value holding a newline is written
    /// as `NAME\n`, its length as 64-bit little endian, the bytes, `\n`.
    static func encode(_ fields: [(name: String, value: String)]) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count + 10 })
        for (name, value) in fields {
            bytes.append(contentsOf: name.utf8)
            if value.utf8.contains(UInt8(ascii: "\n")) {
                bytes.append(UInt8(ascii: "\n"))
                withUnsafeBytes(of: UInt64(value.utf8.count).littleEndian) { bytes.append(contentsOf: $0) }
            } else {
                bytes.append(UInt8(ascii: "="))
            }
            bytes.append(contentsOf: value.utf8)
            bytes.append(UInt8(ascii: "\n"))
        }
        return bytes
    }
}
