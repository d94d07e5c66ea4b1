import CEpoll
import Glibc

extension System {
    /// How one thread wakes another that waits in `poll(2)`, `epoll_wait(2)` or an sd-event loop
    /// on descriptors: an `eventfd(2)`, readable while signalled. The one wake-up primitive of
    /// the code base (the control loop, the metrics listener, the file, device, units and D-Bus
    /// threads).
    ///
    /// Why an eventfd and not a pipe: one descriptor instead of two, and its counter never
    /// fills — a pipe's buffer can, and then a wake-up written while it is full is only safe
    /// because wake-ups are pending already.
    ///
    /// The descriptor lives as long as the object, so a late ``signal()`` from another thread
    /// never writes to a descriptor number the process has reused for something else.
    public final class WakeUp: Sendable {
        /// Poll it for `POLLIN` / `EPOLLIN`.
        public let descriptor: Int32

        public init() throws(CallError) {
            descriptor = try System.call("eventfd", "wake-up") { eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC)) }
        }

        /// Makes the descriptor readable until ``drain()``. Any thread.
        public func signal() {
            var one: UInt64 = 1
            _ = try? System.call("write", "wake-up") { Glibc.write(descriptor, &one, 8) }
        }

        /// Takes the signals given so far; the descriptor is not readable until the next. On
        /// the waiting thread.
        public func drain() {
            var count: UInt64 = 0
            _ = Glibc.read(descriptor, &count, 8)  // EAGAIN: nothing was signalled
        }

        deinit {
            Glibc.close(descriptor)
        }
    }
}
