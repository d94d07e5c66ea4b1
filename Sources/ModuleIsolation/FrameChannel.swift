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
///   (``send(_:)``); a dedicated *writer thread* (one per channel, `eventbus.NAME.writer`) takes
///   everything pending and sends it with one blocking `send` call per wake-up. Writes never
///   overlap. So a burst of events becomes a few large writes, not one per event.
/// - ``sendOrHold(_:whenDrained:)`` is for the host's mailbox queue, which runs on Dispatch's
///   shared pool: it never blocks. When no write is in progress it writes what the socket takes
///   at once (`MSG_DONTWAIT`: a lone event costs no thread hand-over) and leaves the rest to the
///   writer thread; when more than `highWater` bytes wait it answers `.held` and calls
///   `whenDrained` once the writer has taken them — the mailbox stops meanwhile, so a worker
///   that does not keep up fills the module's bounded mailbox, which drops and announces (never
///   the bus, never other modules), and no Dispatch thread waits for the socket. (A Dispatch
///   thread blocked in a system call makes libdispatch start another one; on a loaded machine
///   the host's threads, and the malloc arenas they bring, grew with every such wait.)
/// - ``sendThrottled(inline:_:)`` waits while more than `highWater` bytes are pending: for the
///   worker's own module queue, whose blocking is its back-pressure.
/// - **Reading**: ``readFrames(_:)`` blocks the calling thread (the owner's reader thread) until
///   end of file, an error or ``close()``.
///
/// `MSG_NOSIGNAL` on every send: a peer that died must be an error return, never a SIGPIPE that
/// would kill the host.
public final class FrameChannel: @unchecked Sendable {
    // @unchecked: every `var` below is guarded by `condition`.
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
    /// What an inline write without blocking could not send: the writer thread sends it before
    /// anything pending (which came later).
    private var carry: [UInt8] = []
    /// The buffer an inline write of ``sendOrHold(_:whenDrained:)`` sends from, kept for the next.
    private var inlineBuffer: [UInt8] = []
    /// The `whenDrained` of a ``sendOrHold(_:whenDrained:)`` that answered `.held`: called once,
    /// when the writer has taken the pending bytes or the channel closed.
    private var onDrained: (@Sendable () -> Void)?
    /// `CLOCK_MONOTONIC` when the sender was last held (``sendOrHold(_:whenDrained:)`` answered
    /// `.held`) and not yet let go; nil while it is not held.
    private var heldAt: UInt64?
    /// Rewrites the frames taken for writing, in their order, before they are written: an exec
    /// module's channel turns them into its program's JSON lines (``ExecLines``). It runs while
    /// the channel is writing, so never twice at once. nil: frames are written as they are.
    private let translate: (@Sendable (inout [UInt8]) -> Void)?

    public init(fd: Int32, name: String, highWater: Int = 2 << 20, translate: (@Sendable (inout [UInt8]) -> Void)? = nil) {
        self.fd = fd
        self.name = name
        self.highWater = highWater
        self.translate = translate
    }

    /// How long the sender has been held because its peer does not read (zero when it is not):
    /// a program that stopped reading its input is *stalled*.
    public var heldFor: Duration {
        condition.withLock { heldAt.map { .nanoseconds(Int64(clamping: MonotonicClock.now() &- $0)) } ?? .zero }
    }

    /// Starts the writer thread.
    public func start() {
        let thread = Thread { [self] in
            System.nameCurrentThread("w>" + name)  // Linux keeps 15 bytes of a thread's name
            writeLoop()
        }
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
    /// worker's module queue, whose blocking is the back-pressure); never a socket's reader, and
    /// not the host, whose mailbox queues use ``sendOrHold(_:whenDrained:)``.
    @discardableResult
    public func sendThrottled(inline: Bool = false, _ body: (inout FrameBuffer) -> Void) -> Bool {
        condition.lock()
        while !closed && pending.count > highWater { condition.wait() }
        guard !closed else {
            condition.unlock()
            return false
        }
        body(&pending)
        guard inline, !writing, carry.isEmpty else {
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
            translate?(&outgoing)
            ok = writeAll(outgoing)
            condition.lock()
        }
        writing = false
        let drained = ok ? nil : closeLocked()
        condition.broadcast()
        condition.unlock()
        drained?()
        return true
    }

    /// What ``sendOrHold(_:whenDrained:)`` did with the frames.
    public enum SendOutcome: Sendable {
        /// Written or pending; more may follow.
        case accepted
        /// Pending, but more than `highWater` bytes now wait: send nothing more until
        /// `whenDrained` is called.
        case held
        /// The channel is closed: nothing was appended.
        case closed
    }

    /// Appends frames and never blocks (for a caller on Dispatch's shared pool: the host's
    /// mailbox queue). When no write is in progress, writes what the socket takes at once right
    /// here and leaves the rest to the writer thread. Answers `.held` when more than
    /// `highWater` bytes wait; `whenDrained` is then called exactly once, on the writer thread
    /// once it has taken them, or on the thread that closes the channel.
    public func sendOrHold(_ body: (inout FrameBuffer) -> Void, whenDrained: @escaping @Sendable () -> Void) -> SendOutcome {
        condition.lock()
        guard !closed else {
            condition.unlock()
            return .closed
        }
        body(&pending)
        if pending.count > highWater {
            onDrained = whenDrained
            if heldAt == nil { heldAt = MonotonicClock.now() }
            if writerIdle { condition.broadcast() }
            condition.unlock()
            return .held
        }
        guard !writing, carry.isEmpty else {
            if writerIdle { condition.broadcast() }
            condition.unlock()
            return .accepted
        }
        writing = true
        var outgoing: [UInt8] = []
        swap(&outgoing, &inlineBuffer)
        pending.take(into: &outgoing)
        condition.unlock()
        translate?(&outgoing)
        let written = writeAvailable(outgoing)
        condition.lock()
        writing = false
        var drained: (@Sendable () -> Void)?
        if let written {
            if written < outgoing.count { carry = Array(outgoing[written...]) }
        } else {
            drained = closeLocked()
        }
        outgoing.removeAll(keepingCapacity: outgoing.capacity <= 1 << 20)
        swap(&outgoing, &inlineBuffer)
        condition.broadcast()
        condition.unlock()
        drained?()
        return .accepted
    }

    /// Stops sending: what is pending is discarded, waiting senders return false, a held sender
    /// is told (its `whenDrained`), a blocked reader sees end of file. The descriptor stays open
    /// until ``closeDescriptor()``. Safe from any thread at any time: once ``closeDescriptor()``
    /// has run it does nothing to it (the descriptor's number may belong to something else by then).
    public func close() {
        let drained = condition.withLock {
            if !descriptorClosed { try? System.shutdown(fd, .both) }
            return closeLocked()
        }
        drained?()
    }

    /// Under `condition`: marks the channel closed and returns the held sender's `whenDrained`,
    /// for the caller to call once it let go of the lock.
    private func closeLocked() -> (@Sendable () -> Void)? {
        closed = true
        condition.broadcast()
        heldAt = nil
        defer { onDrained = nil }
        return onDrained
    }

    /// Waits (up to `timeout`) until everything sent so far is written, then closes.
    public func flushAndClose(timeout: Duration) {
        let deadline = Date().addingTimeInterval(timeout.secondsValue)
        condition.withLock {
            while !closed && (!pending.isEmpty || !carry.isEmpty || flushing || writing) {
                if !condition.wait(until: deadline) { break }
            }
        }
        close()
    }

    /// Closes the descriptor, after the writer thread has let go of it.
    public func closeDescriptor() {
        let drained = condition.withLock {
            let drained = closeLocked()
            while !writerDone { condition.wait() }
            if !descriptorClosed {
                descriptorClosed = true
                System.close(fd)
            }
            return drained
        }
        drained?()
    }

    /// The writer thread: sends what an inline write left (`carry`), else everything pending,
    /// blocking in `send` as long as the peer does not read.
    private func writeLoop() {
        var outgoing: [UInt8] = []
        while true {
            condition.lock()
            while !closed && ((pending.isEmpty && carry.isEmpty) || writing) {
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
            let taken = carry.isEmpty
            if taken {
                pending.take(into: &outgoing)
            } else {
                swap(&outgoing, &carry)
                carry.removeAll()
            }
            var drained: (@Sendable () -> Void)?
            if pending.count <= highWater {
                drained = onDrained
                onDrained = nil
                heldAt = nil
            }
            flushing = true
            writing = true
            condition.broadcast()  // throttled senders may go on
            condition.unlock()
            drained?()
            if taken { translate?(&outgoing) }
            let ok = writeAll(outgoing)
            outgoing.removeAll(keepingCapacity: outgoing.capacity <= 8 << 20)
            condition.lock()
            flushing = false
            writing = false
            drained = ok ? nil : closeLocked()
            condition.broadcast()
            condition.unlock()
            drained?()
        }
    }

    private func writeAll(_ bytes: [UInt8]) -> Bool {
        // Any failure (EPIPE: the peer is gone) closes the channel; the caller says so.
        (try? bytes.withUnsafeBytes { try System.StreamSocket.sendAll(fd, $0, "fd \(fd)") }) != nil
    }

    /// Writes what the socket takes without waiting; returns how many bytes, or nil when the
    /// channel failed (the peer is gone).
    private func writeAvailable(_ bytes: [UInt8]) -> Int? {
        bytes.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                switch try? System.StreamSocket.write(fd, UnsafeRawBufferPointer(rebasing: raw[offset...]), "fd \(fd)") {
                case .wrote(let count): offset += count
                case .wouldBlock: return offset
                case .closed, nil: return nil
                }
            }
            return offset
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
