import CEpoll
import Dispatch
import Foundation
import Glibc

/// What the loop watches a descriptor for: called on the loop's thread with epoll's ready bits.
public protocol LoopWatcher: AnyObject {
    func ready(_ events: UInt32)
}

extension System {
    /// The host's event loop: one thread, one epoll instance, for the control socket (its listening
    /// socket and every client connection) and the metrics listener (its socket and connections).
    ///
    /// Why one epoll thread rather than a Dispatch queue and two Dispatch sources per client:
    /// Dispatch gives each client its own serial queue, and under connection churn the queues' work
    /// lands on up to ~250 worker threads; it reports no peer's hang-up (`EPOLLRDHUP`/`EPOLLHUP`)
    /// while only the write side is watched, so a tail whose client has gone would keep its
    /// session, feed and sources until the next matching event; and a listening socket that fails
    /// with `EMFILE` stays readable, so its read source spins. Here the loop sees every
    /// condition epoll reports, chooses the interest of each descriptor itself (level-triggered),
    /// and a client costs a descriptor and a few small buffers, no thread. SwiftNIO would give the
    /// same (accept back-off, half-closure, writability), at the price of a large dependency, its
    /// own buffer types between the feed and the socket, and a minute more of every clean build;
    /// this loop is ~200 lines and keeps the tail's hot path (encode a batch, one `send`) as it was.
    ///
    /// ## Threads
    /// Everything registered here — ``add(_:events:watcher:)``, ``modify(_:events:)``,
    /// ``remove(_:)``, ``after(_:_:)`` and the watchers' `ready` — runs on the loop's thread.
    /// ``execute(_:)`` is the one entry from other threads: it queues work for the loop, and wakes
    /// it through an eventfd only when the loop sleeps in `epoll_wait` (one write per idle spell; a
    /// busy loop picks the work up without a system call).
    public final class EventLoop: @unchecked Sendable {
        // @unchecked: `pending`/`wakeRequested` are behind `lock`; the rest is the loop thread's.

        public static let readable = UInt32(EPOLLIN.rawValue)
        public static let writable = UInt32(EPOLLOUT.rawValue)
        public static let peerClosedWriting = UInt32(EPOLLRDHUP.rawValue)
        public static let hangUp = UInt32(EPOLLHUP.rawValue)
        public static let failed = UInt32(EPOLLERR.rawValue)

        private let epoll: Int32
        private let wake: System.WakeUp
        private let lock = NSLock()
        private var pending: [@Sendable () -> Void] = []
        /// The loop is in (or about to enter) `epoll_wait` with nothing pending: work must wake it.
        private var sleeping = false
        private var wakeRequested = false
        /// Set by ``stopAndWait()``: later work is dropped (a feed may still wake a session that the
        /// shutdown already ended), and the eventfd, closed, is never written.
        private var finished = false

        private var watchers: [Int32: LoopWatcher] = [:]
        private var timers: [(deadline: ContinuousClock.Instant, work: () -> Void)] = []
        private var running = true
        private let stopped = DispatchSemaphore(value: 0)

        /// The name of its thread, as `top -H`, perf and /proc show it.
        private let name: String

        public init(name: String) throws(System.CallError) {
            self.name = name
            epoll = epoll_create1(Int32(EPOLL_CLOEXEC))
            guard epoll >= 0 else { throw System.CallError(call: "epoll_create1", path: name, errno: errno) }
            do {
                wake = try System.WakeUp()
            } catch {
                Glibc.close(epoll)
                throw error
            }
            var event = epoll_event()
            event.events = Self.readable
            event.data.fd = wake.descriptor
            _ = epoll_ctl(epoll, EPOLL_CTL_ADD, wake.descriptor, &event)
        }

        /// Starts the loop's thread.
        public func start() {
            let thread = Thread { [self] in
                System.nameCurrentThread(name)
                run()
            }
            thread.start()
        }

        /// Runs `work` on the loop's thread, after what is already queued; nothing once the loop
        /// has stopped. Any thread.
        public func execute(_ work: @escaping @Sendable () -> Void) {
            let mustWake = lock.withLock { () -> Bool in
                guard !finished else { return false }
                pending.append(work)
                guard sleeping, !wakeRequested else { return false }
                wakeRequested = true
                return true
            }
            if mustWake { wake.signal() }
        }

        /// Ends the loop after the work queued so far and waits for its thread to finish. Watchers
        /// still registered are dropped (their owners closed or are closing their descriptors).
        public func stopAndWait() {
            execute { [self] in running = false }
            stopped.wait()
            lock.withLock {
                finished = true
                pending = []
                Glibc.close(epoll)
            }
        }

        // MARK: The loop's thread

        public func add(_ fd: Int32, events: UInt32, watcher: LoopWatcher) throws(System.CallError) {
            var event = epoll_event()
            event.events = events
            event.data.fd = fd
            guard epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &event) == 0 else {
                throw System.CallError(call: "epoll_ctl(ADD)", path: "fd \(fd)", errno: errno)
            }
            watchers[fd] = watcher
        }

        /// Changes what `fd` is watched for. `EPOLLHUP` and `EPOLLERR` are always reported, so a
        /// descriptor watched for nothing still tells when its peer is gone.
        public func modify(_ fd: Int32, events: UInt32) {
            var event = epoll_event()
            event.events = events
            event.data.fd = fd
            _ = epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &event)
        }

        /// Stops watching `fd` (before its owner closes it).
        public func remove(_ fd: Int32) {
            _ = epoll_ctl(epoll, EPOLL_CTL_DEL, fd, nil)
            watchers[fd] = nil
        }

        /// Runs `work` on the loop after `delay` (coarse: the back-off of the accept loop).
        public func after(_ delay: Duration, _ work: @escaping () -> Void) {
            timers.append((ContinuousClock.now + delay, work))
        }

        private func run() {
            var events = [epoll_event](repeating: epoll_event(), count: 128)
            var work: [@Sendable () -> Void] = []
            while running {
                let idle = lock.withLock { () -> Bool in
                    guard pending.isEmpty else { return false }
                    sleeping = true
                    return true
                }
                let count = events.withUnsafeMutableBufferPointer { buffer in
                    epoll_wait(epoll, buffer.baseAddress, Int32(buffer.count), idle ? timeout() : 0)
                }
                if count < 0 && errno != EINTR {
                    preconditionFailure("epoll_wait: \(String(cString: strerror(errno)))")
                }
                lock.withLock {
                    sleeping = false
                    wakeRequested = false
                    swap(&pending, &work)
                }
                for index in 0..<max(0, Int(count)) {
                    let fd = events[index].data.fd
                    if fd == wake.descriptor {
                        wake.drain()
                        continue
                    }
                    // A watcher earlier in this batch may have closed this one: then it is gone (or a
                    // new connection got the number, and sees a spurious wake-up it tolerates).
                    watchers[fd]?.ready(events[index].events)
                }
                for item in work { item() }
                work.removeAll(keepingCapacity: work.count <= 1024)
                runDueTimers()
            }
            watchers.removeAll()
            timers.removeAll()
            stopped.signal()
        }

        /// Milliseconds to the next timer; -1 (wait for a descriptor) when there is none.
        private func timeout() -> Int32 {
            guard !timers.isEmpty, let next = timers.map(\.deadline).min() else { return -1 }
            let left = next - .now
            if left <= .zero { return 0 }
            return Int32(min(60_000, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000 + 1))
        }

        private func runDueTimers() {
            guard !timers.isEmpty else { return }
            let now = ContinuousClock.now
            let due = timers.filter { $0.deadline <= now }
            timers.removeAll { $0.deadline <= now }
            for timer in due { timer.work() }
        }
    }
}
