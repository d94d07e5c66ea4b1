@_spi(EventBusHost) import EventBusKit
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import SystemCalls

/// One end of the host–worker socket.
///
/// ## Threads
/// - **Writing**: callers on any thread append frames to one pending buffer under a lock
///   (``send(_:)``); a dedicated *writer thread* takes everything pending and sends it with one
///   `send` call per wake-up — or, for ``sendThrottled(inline:_:)`` callers that find no write
///   in progress, the caller sends it itself. Writes never overlap. So a burst of events from the host's mailbox queue becomes a few
///   large writes, not one per event, and no caller ever blocks in a system call — except
///   ``sendThrottled(_:)``, which waits while more than `highWater` bytes are pending: that is
///   how a worker that does not keep up pushes back on the host's mailbox queue, whose bounded
///   mailbox then drops and announces (never the bus, never other modules).
/// - **Reading**: ``readFrames(_:)`` blocks the calling thread (the owner's reader thread) until
///   end of file, an error or ``close()``.
///
/// `MSG_NOSIGNAL` on every send: a peer that died must be an error return, never a SIGPIPE that
/// would kill the host.
public final class FrameChannel: @unchecked Sendable {
    // @unchecked: `pending`, `closed`, `writerIdle` are guarded by `condition`.
    public let fd: Int32
    private let name: String
    private let highWater: Int
    private let condition = NSCondition()
    private var pending = FrameBuffer()
    private var closed = false
    private var flushing = false
    private var writerIdle = false
    private var writerDone = false
    /// ``closeDescriptor()`` has closed `fd`.
    private var descriptorClosed = false
    /// A write is in progress, by the writer thread or an inline writer; writes never overlap.
    private var writing = false

    public init(fd: Int32, name: String, highWater: Int = 2 << 20) {
        self.fd = fd
        self.name = name
        self.highWater = highWater
    }

    /// Starts the writer thread.
    public func start() {
        let thread = Thread { [self] in writeLoop() }
        thread.name = "eventbus.\(name).writer"
        thread.start()
    }

    public var isClosed: Bool { condition.withLock { closed } }

    /// Appends frames; false (nothing appended) once the channel is closed.
    @discardableResult
    public func send(_ body: (inout FrameBuffer) -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !closed else { return false }
        body(&pending)
        if writerIdle { condition.broadcast() }
        return true
    }

    /// Like ``send(_:)``, but first waits while more than `highWater` bytes wait to be written.
    /// With `inline`, when no write is in progress the caller writes itself — everything pending,
    /// until nothing is — instead of waking the writer thread: one thread hand-over less per
    /// batch. Only for callers that may block in `send(2)` while the peer does not read (the
    /// host's mailbox queue, whose blocking is the back-pressure); never a socket's reader.
    @discardableResult
    public func sendThrottled(inline: Bool = false, _ body: (inout FrameBuffer) -> Void) -> Bool {
        condition.lock()
        while !closed && pending.count > highWater { condition.wait() }
        guard !closed else {
            condition.unlock()
            return false
        }
        body(&pending)
        guard inline, !writing else {
            if writerIdle { condition.broadcast() }
            condition.unlock()
            return true
        }
        writing = true
        var outgoing: [UInt8] = []
        var ok = true
        while ok && !closed && !pending.isEmpty {
            pending.take(into: &outgoing)
            condition.broadcast()  // throttled senders may go on
            condition.unlock()
            ok = writeAll(outgoing)
            condition.lock()
        }
        writing = false
        if !ok { closed = true }
        condition.broadcast()
        condition.unlock()
        return true
    }

    /// Stops sending: what is pending is discarded, waiting senders return false, a blocked
    /// reader sees end of file. The descriptor stays open until ``closeDescriptor()``.
    /// Safe from any thread at any time: once ``closeDescriptor()`` has run it does nothing (the
    /// descriptor's number may belong to something else by then).
    public func close() {
        condition.withLock {
            closed = true
            condition.broadcast()
            if !descriptorClosed { shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    /// Waits (up to `timeout`) until everything sent so far is written, then closes.
    public func flushAndClose(timeout: Duration) {
        let deadline = Date().addingTimeInterval(timeout.secondsValue)
        condition.withLock {
            while !closed && (!pending.isEmpty || flushing || writing) {
                if !condition.wait(until: deadline) { break }
            }
        }
        close()
    }

    /// Closes the descriptor, after the writer thread has let go of it.
    public func closeDescriptor() {
        condition.withLock {
            closed = true
            condition.broadcast()
            while !writerDone { condition.wait() }
            guard !descriptorClosed else { return }
            descriptorClosed = true
            Glibc.close(fd)
        }
    }

    private func writeLoop() {
        var outgoing: [UInt8] = []
        while true {
            condition.lock()
            while !closed && (pending.isEmpty || writing) {
                writerIdle = true
                condition.wait()
            }
            writerIdle = false
            if closed {
                writerDone = true
                condition.broadcast()
                condition.unlock()
                return
            }
            pending.take(into: &outgoing)
            flushing = true
            writing = true
            condition.broadcast()  // throttled senders may go on
            condition.unlock()
            let ok = writeAll(outgoing)
            outgoing.removeAll(keepingCapacity: outgoing.capacity <= 8 << 20)
            condition.withLock {
                flushing = false
                writing = false
                if !ok { closed = true }
                condition.broadcast()
            }
        }
    }

    private func writeAll(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                // Any failure (EPIPE: the peer is gone) closes the channel; the caller says so.
                guard let n = (try? System.call("send") { Glibc.send(fd, raw.baseAddress! + offset, raw.count - offset, Int32(MSG_NOSIGNAL)) }) else {
                    return false
                }
                offset += n
            }
            return true
        }
    }

    /// What ``readFrames(_:)`` returns when the peer closed (or the read failed), rather than
    /// broke the protocol.
    public static let endOfInput = "end of file"

    /// Reads frames until end of file, an error or a malformed frame, calling `handle` for each
    /// on this thread (the payload is valid during the call only). Returns why reading ended. A `handle` that throws ends it too.
    public func readFrames(_ handle: (FrameType, UnsafeRawBufferPointer) throws -> Void) -> String {
        let reader = FrameReader()
        while true {
            switch reader.next() {
            case .frame(let type, let payload):
                do { try handle(type, payload) } catch { return "\(error)" }
            case .malformed(let reason):
                return "malformed frame: \(reason)"
            case .needMore:
                if !reader.fill(from: fd) { return Self.endOfInput }
            }
        }
    }
}
