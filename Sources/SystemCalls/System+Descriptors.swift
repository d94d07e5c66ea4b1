import Glibc

/// The libc calls any descriptor takes, whatever it refers to: reading, closing, moving, the
/// close-on-exec flag; and for sockets, pairs, options and shutting one direction. Every
/// descriptor made here is close-on-exec, so a program a module or rule starts inherits only
/// what ``spawn(_:arguments:environment:setup:)`` hands it.
extension System {
    /// `close(2)`, its result ignored: Linux releases the descriptor even when `close` reports
    /// an error (`EINTR` included), so there is nothing to retry, and another thread may
    /// already have the number again.
    public static func close(_ fd: Int32) {
        _ = Glibc.close(fd)
    }

    /// `read(2)`: at most `buffer.count` bytes, 0 at the end; `EAGAIN` when a non-blocking
    /// descriptor has nothing yet.
    public static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer,
                            path: @autoclosure () -> String = "") throws(CallError) -> Int {
        try call("read", path()) { Glibc.read(fd, buffer.baseAddress, buffer.count) }
    }

    /// Sets `FD_CLOEXEC`, so programs this process starts do not inherit the descriptor.
    public static func setCloseOnExec(_ fd: Int32) throws(CallError) {
        let flags = try call("fcntl(F_GETFD)", "fd \(fd)") { fcntl(fd, F_GETFD) }
        _ = try call("fcntl(F_SETFD)", "fd \(fd)") { fcntl(fd, F_SETFD, flags | FD_CLOEXEC) }
    }

    /// `fd` copied to the lowest free number from `lowest` up, close-on-exec (`F_DUPFD_CLOEXEC`);
    /// `fd` stays open.
    public static func duplicate(_ fd: Int32, atLeast lowest: Int32) throws(CallError) -> Int32 {
        try call("fcntl(F_DUPFD_CLOEXEC)", "fd \(fd)") { fcntl(fd, F_DUPFD_CLOEXEC, lowest) }
    }

    /// A connected pair of `AF_UNIX` stream sockets, both close-on-exec.
    public static func socketPair() throws(CallError) -> (Int32, Int32) {
        var pair: [Int32] = [-1, -1]
        _ = try call("socketpair", "AF_UNIX") { socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) }
        return (pair[0], pair[1])
    }

    /// A pipe, both ends close-on-exec from the start: (read end, write end).
    public static func makePipe() throws(CallError) -> (read: Int32, write: Int32) {
        var ends: [Int32] = [-1, -1]
        _ = try call("pipe2") { pipe2(&ends, O_CLOEXEC) }
        return (ends[0], ends[1])
    }

    /// `pipe2(2)`, looked up at run time: Swift's Glibc module does not declare it (it is a GNU
    /// extension), and `pipe` + `fcntl` would leave a moment in which a process another thread
    /// starts could inherit the pipe.
    private static let pipe2: @convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32 = {
        guard let symbol = dlsym(nil, "pipe2") else { fatalError("glibc without pipe2") }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32).self)
    }()

    /// `setsockopt(2)` of an `int` option (a netlink group to join, a flag).
    public static func setSocketOption(_ fd: Int32, level: Int32, _ option: Int32, to value: Int32) throws(CallError) {
        var value = value
        _ = try call("setsockopt", "fd \(fd)") { setsockopt(fd, level, option, &value, socklen_t(MemoryLayout<Int32>.size)) }
    }

    /// How many messages the kernel dropped for socket `fd` because its receive buffer was full
    /// (`SO_MEMINFO`'s `SK_MEMINFO_DROPS`, Linux 4.0+): what a netlink listener counts as loss.
    /// Nil when the kernel does not say.
    public static func droppedMessages(of fd: Int32) -> UInt32? {
        // SO_MEMINFO (55) and the SK_MEMINFO_DROPS slot (8), from <asm-generic/socket.h> and
        // <linux/sock_diag.h>, which Swift's Glibc module does not import.
        let memoryInfo: Int32 = 55, dropsSlot = 8
        var info = [UInt32](repeating: 0, count: 16)
        var length = socklen_t(info.count * MemoryLayout<UInt32>.size)
        guard getsockopt(fd, SOL_SOCKET, memoryInfo, &info, &length) == 0,
              Int(length) > dropsSlot * MemoryLayout<UInt32>.size
        else { return nil }
        return info[dropsSlot]
    }

    /// Which direction ``shutdown(_:_:)`` ends.
    public enum Direction: Sendable {
        case reading, writing, both

        var how: Int32 {
            switch self {
            case .reading: Int32(SHUT_RD)
            case .writing: Int32(SHUT_WR)
            case .both: Int32(SHUT_RDWR)
            }
        }
    }

    /// `shutdown(2)`: ends one or both directions of a socket for every process that holds it
    /// — a reader blocked in `recv` returns, the peer reads its end — while the descriptor
    /// stays open (another thread may be using the number).
    public static func shutdown(_ fd: Int32, _ direction: Direction) throws(CallError) {
        _ = try call("shutdown", "fd \(fd)") { Glibc.shutdown(fd, direction.how) }
    }
}
