import Foundation
import Synchronization

/// A relay, run by the test on this machine, between one D-Bus client in the container and the
/// container's system bus: it listens on a socket in the container's file system and connects
/// its client to `/run/dbus/system_bus_socket`. While held, what the client sends stays in the
/// relay — its method calls do not reach the bus, so no reply can come — while what the bus
/// sends the client (signals) goes on. It counts the replies (method returns and errors) it
/// passed to the client, so a test knows when a released call has been answered.
///
/// One thread, ``run()``, waits in poll(2) on the listener, then on both ends and a wake-up
/// pipe; `hold`, `release` and `stop` come from the test's tasks and wake it.
final class DBusRelay: Sendable {
    private struct State {
        var holding = false
        /// What the client sent while held, in order.
        var held: [UInt8] = []
        var replies = 0
        var stopping = false
    }

    private let state = Mutex(State())
    private let listener: Int32
    private let upstream: String
    private let wakeUp: (read: Int32, write: Int32)

    /// Listens at `path` (a path of this machine: `/proc/LEADER/root/run/…` for a container's
    /// `/run`) and relays its first client to the bus socket at `bus`, a path of this machine too.
    init(listeningAt path: String, bus: String) throws {
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0, Self.withAddress(path, { bind(listener, $0, $1) }) == 0, listen(listener, 1) == 0 else {
            let reason = String(cString: strerror(errno))
            if listener >= 0 { close(listener) }
            throw Failure("the relay cannot listen at \(path): \(reason)")
        }
        self.listener = listener
        upstream = bus
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else { throw Failure("the relay has no wake-up pipe") }
        for end in pipeEnds { _ = fcntl(end, F_SETFL, O_NONBLOCK) }
        wakeUp = (pipeEnds[0], pipeEnds[1])
        Thread { [self] in run() }.start()
    }

    deinit {
        close(listener)
        close(wakeUp.read)
        close(wakeUp.write)
    }

    /// From now on, what the client sends waits in the relay.
    func hold() {
        state.withLock { $0.holding = true }
        wake()
    }

    /// Sends what waited, and everything after it, to the bus.
    func release() {
        state.withLock { $0.holding = false }
        wake()
    }

    /// Bytes the client sent that wait in the relay.
    var heldBytes: Int { state.withLock { $0.held.count } }

    /// Method returns and errors passed to the client so far.
    var replies: Int { state.withLock { $0.replies } }

    /// Closes both ends and the listener (the thread does, when it wakes).
    func stop() {
        state.withLock { $0.stopping = true }
        wake()
    }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(wakeUp.write, &byte, 1)
    }

    private func run() {
        var descriptors = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeUp.read, events: Int16(POLLIN), revents: 0)]
        while !state.withLock({ $0.stopping }) {
            _ = poll(&descriptors, 2, -1)
            drainWakeUp()
            if descriptors[0].revents != 0 { break }
        }
        guard !state.withLock({ $0.stopping }) else { return }
        let client = accept(listener, nil, nil)
        let bus = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer {
            close(client)
            close(bus)
        }
        guard client >= 0, bus >= 0, Self.withAddress(upstream, { connect(bus, $0, $1) }) == 0 else { return }
        var fromBus = ReplyCounter()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            var ends = [pollfd(fd: client, events: Int16(POLLIN), revents: 0), pollfd(fd: bus, events: Int16(POLLIN), revents: 0),
                        pollfd(fd: wakeUp.read, events: Int16(POLLIN), revents: 0)]
            _ = poll(&ends, 3, -1)
            drainWakeUp()
            // The client's bytes join the held ones, which go (in order) unless holding.
            if ends[0].revents != 0 {
                let count = read(client, &buffer, buffer.count)
                guard count > 0 else { return }
                state.withLock { $0.held += buffer[..<count] }
            }
            let (stopping, toSend) = state.withLock { state -> (Bool, [UInt8]) in
                guard !state.holding else { return (state.stopping, []) }
                defer { state.held = [] }
                return (state.stopping, state.held)
            }
            if stopping || !Self.writeAll(toSend, to: bus) { return }
            if ends[1].revents != 0 {
                let count = read(bus, &buffer, buffer.count)
                guard count > 0 else { return }
                let bytes = Array(buffer[..<count])
                guard Self.writeAll(bytes, to: client) else { return }
                let replies = fromBus.take(bytes)
                if replies > 0 { state.withLock { $0.replies += replies } }
            }
        }
    }

    private func drainWakeUp() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while read(wakeUp.read, &bytes, bytes.count) > 0 {}
    }

    private static func writeAll(_ bytes: [UInt8], to descriptor: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }

    private static func withAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// The bus's side of the stream: the authentication's text lines (`OK <guid>`,
    /// `AGREE_UNIX_FD`…), then messages, each a 16-byte header (endianness `l` or `B`, the type,
    /// flags, version, the body's length, the serial, the header fields' length), the fields
    /// padded to 8 bytes, and the body. Type 2 is a method return, 3 an error.
    private struct ReplyCounter {
        private var pending: [UInt8] = []
        private var authenticated = false

        /// The replies that `bytes` completed.
        mutating func take(_ bytes: [UInt8]) -> Int {
            pending += bytes
            var replies = 0
            var offset = 0
            while true {
                let rest = pending[offset...]
                if !authenticated {
                    if let first = rest.first, first == UInt8(ascii: "l") || first == UInt8(ascii: "B") {
                        authenticated = true
                        continue
                    }
                    guard let end = rest.firstIndex(of: UInt8(ascii: "\n")) else { break }
                    offset = end + 1
                    continue
                }
                guard rest.count >= 16 else { break }
                let start = rest.startIndex
                let littleEndian = rest[start] == UInt8(ascii: "l")
                func uint32(at position: Int) -> Int {
                    let bytes = (0..<4).map { Int(rest[start + position + $0]) }
                    return littleEndian ? bytes[0] | bytes[1] << 8 | bytes[2] << 16 | bytes[3] << 24
                                        : bytes[3] | bytes[2] << 8 | bytes[1] << 16 | bytes[0] << 24
                }
                let fields = uint32(at: 12)
                let length = 16 + (fields + 7) / 8 * 8 + uint32(at: 4)
                guard rest.count >= length else { break }
                if rest[start + 1] == 2 || rest[start + 1] == 3 { replies += 1 }
                offset = start + length
            }
            pending.removeFirst(offset)
            return replies
        }
    }
}
