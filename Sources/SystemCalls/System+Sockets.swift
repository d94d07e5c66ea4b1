import Glibc

/// The libc calls of the systemd integration: Unix datagram sockets (sd_notify, journald's
/// native protocol), inherited sockets (socket activation), sealed memory files (journald's
/// large-message path). Kept beside ``System`` for the same reason: `errno` is read right after
/// the call that set it, and everything above works with Swift values.
extension System {
    /// A Unix socket address. A leading `@` means Linux's abstract namespace (the name starts
    /// with a NUL byte instead of living in the file system), as systemd writes `$NOTIFY_SOCKET`.
    public struct UnixAddress: Sendable, CustomStringConvertible {
        /// The path as given, `@` included.
        public let path: String
        private let bytes: [UInt8]

        /// Nil when the path is empty or longer than `sun_path` holds.
        public init?(_ path: String) {
            var bytes = Array(path.utf8)
            guard !bytes.isEmpty else { return nil }
            if bytes[0] == UInt8(ascii: "@") { bytes[0] = 0 }
            guard bytes.count < MemoryLayout.size(ofValue: sockaddr_un().sun_path) else { return nil }
            self.path = path
            self.bytes = bytes
        }

        public var description: String { path }

        /// Calls `body` with the `sockaddr` and its length. An abstract address's length counts
        /// exactly its name (no terminating NUL), a path's includes the NUL, as the kernel expects.
        public func withSocketAddress<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: bytes) }
            let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
            let length = pathOffset + bytes.count + (bytes[0] == 0 ? 0 : 1)
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(length)) }
            }
        }
    }

    /// A new `AF_UNIX`, `SOCK_DGRAM` socket, close-on-exec, unbound and unconnected: each
    /// datagram names its destination, so a restarted receiver is reached again without
    /// reconnecting. Sends block for at most `sendTimeout` (the receiver's queue is full);
    /// `sendBufferSize` raises the largest datagram that fits (the kernel caps it at `wmem_max`,
    /// and root lifts that cap with `SO_SNDBUFFORCE`).
    public static func datagramSocket(sendTimeout: Duration, sendBufferSize: Int32? = nil) throws(CallError) -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw CallError(call: "socket", path: "AF_UNIX", errno: errno) }
        let seconds = sendTimeout.components.seconds
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int(sendTimeout.components.attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        if var size = sendBufferSize {
            if setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, socklen_t(MemoryLayout<Int32>.size)) != 0 {
                setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, socklen_t(MemoryLayout<Int32>.size))
            }
        }
        return fd
    }

    /// Whether a datagram socket is bound at `address` and takes datagrams: `connect(2)` of a
    /// throw-away socket, which fails with `ENOENT` or `ECONNREFUSED` when nobody listens.
    public static func probeDatagramReceiver(_ address: UnixAddress) throws(CallError) {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw CallError(call: "socket", path: address.path, errno: errno) }
        defer { Glibc.close(fd) }
        let result = address.withSocketAddress { connect(fd, $0, $1) }
        guard result == 0 else { throw CallError(call: "connect", path: address.path, errno: errno) }
    }

    /// What a datagram send came to.
    public enum SendOutcome: Equatable {
        case sent
        /// The receiver's queue is full (or the send timed out waiting for room).
        case wouldBlock
        /// Larger than the socket can send in one datagram (`EMSGSIZE`, `ENOBUFS`).
        case tooLarge
        case failed(errno: Int32)
    }

    /// Sends `bytes` as one datagram to `address`, with `descriptor` attached as `SCM_RIGHTS`
    /// if given. `wait: false` returns ``SendOutcome/wouldBlock`` at once instead of waiting
    /// for room (`MSG_DONTWAIT`).
    public static func sendDatagram(_ bytes: UnsafeRawBufferPointer, to address: UnixAddress, on fd: Int32,
                             wait: Bool, passing descriptor: Int32? = nil) -> SendOutcome {
        // One cmsghdr (16 bytes on 64-bit Linux) followed by an int, padded to 8: CMSG_SPACE(4).
        let headerSize = MemoryLayout<cmsghdr>.size
        var control = [UInt8](repeating: 0, count: headerSize + 8)
        let failure: Int32? = address.withSocketAddress { socketAddress, length in
            var vector = iovec(iov_base: UnsafeMutableRawPointer(mutating: bytes.baseAddress), iov_len: bytes.count)
            return withUnsafeMutablePointer(to: &vector) { vectorPointer -> Int32? in
                control.withUnsafeMutableBytes { controlBytes -> Int32? in
                    var message = msghdr()
                    message.msg_name = UnsafeMutableRawPointer(mutating: socketAddress)
                    message.msg_namelen = length
                    message.msg_iov = vectorPointer
                    message.msg_iovlen = 1
                    if let descriptor {
                        let header = controlBytes.baseAddress!.assumingMemoryBound(to: cmsghdr.self)
                        header.pointee.cmsg_len = headerSize + MemoryLayout<Int32>.size
                        header.pointee.cmsg_level = SOL_SOCKET
                        header.pointee.cmsg_type = Int32(SCM_RIGHTS)
                        controlBytes.storeBytes(of: descriptor, toByteOffset: headerSize, as: Int32.self)
                        message.msg_control = controlBytes.baseAddress
                        message.msg_controllen = controlBytes.count
                    }
                    var flags = Int32(MSG_NOSIGNAL)
                    if !wait { flags |= Int32(MSG_DONTWAIT) }
                    do throws(System.CallError) {
                        _ = try System.call("sendmsg") { sendmsg(fd, &message, flags) }
                        return nil
                    } catch {
                        return error.errno
                    }
                }
            }
        }
        guard let failure else { return .sent }
        switch failure {
        case EAGAIN, EWOULDBLOCK: return .wouldBlock
        case EMSGSIZE, ENOBUFS: return .tooLarge
        case let code: return .failed(errno: code)
        }
    }

    /// A memory file holding `bytes`, sealed against any change: what journald accepts in place
    /// of a datagram too large to send (it refuses unsealed memory files).
    ///
    /// `memfd_create` is looked up at run time because Swift's Glibc module does not declare it;
    /// glibc has exported it since 2.27.
    public static func sealedMemoryFile(named name: String, containing bytes: UnsafeRawBufferPointer) throws(CallError) -> Int32 {
        typealias MemfdCreate = @convention(c) (UnsafePointer<CChar>, UInt32) -> Int32
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "memfd_create") else {
            throw CallError(call: "memfd_create", path: name, errno: ENOSYS)
        }
        let memfdCreate = unsafeBitCast(symbol, to: MemfdCreate.self)
        let closeOnExec: UInt32 = 0x0001, allowSealing: UInt32 = 0x0002  // MFD_CLOEXEC, MFD_ALLOW_SEALING
        let fd = memfdCreate(name, closeOnExec | allowSealing)
        guard fd >= 0 else { throw CallError(call: "memfd_create", path: name, errno: errno) }
        do throws(CallError) {
            try writeAll(fd, bytes, path: name)
        } catch {
            Glibc.close(fd)
            throw error
        }
        // F_ADD_SEALS with F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE.
        let addSeals: Int32 = 1033, allSeals: Int32 = 0x1 | 0x2 | 0x4 | 0x8
        guard fcntl(fd, addSeals, allSeals) == 0 else {
            let code = errno
            Glibc.close(fd)
            throw CallError(call: "fcntl(F_ADD_SEALS)", path: name, errno: code)
        }
        return fd
    }

    /// Writes all of `text` to standard error (a line that must get out even when the log
    /// handler cannot deliver).
    public static func writeToStandardError(_ text: String) {
        // Nothing to do when even that fails.
        _ = try? Array(text.utf8).withUnsafeBytes { try writeAll(STDERR_FILENO, $0) }
    }

    /// The device and inode of an open descriptor, as `fstat(2)` gives them.
    public static func deviceAndInode(of fd: Int32) -> (device: UInt64, inode: UInt64)? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        return (UInt64(info.st_dev), UInt64(info.st_ino))
    }

    public static var processID: Int32 { getpid() }

    /// `CLOCK_MONOTONIC` in microseconds: the clock of systemd's `MONOTONIC_USEC=`.
    public static var monotonicMicroseconds: UInt64 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt64(now.tv_sec) * 1_000_000 + UInt64(now.tv_nsec) / 1_000
    }

    /// An environment variable (`getenv(3)`).
    public static func environment(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }

    /// Removes an environment variable, so processes this one starts do not inherit it.
    /// Call before other threads read the environment: `unsetenv` is not thread-safe.
    public static func unsetEnvironment(_ name: String) {
        unsetenv(name)
    }

    // MARK: Inherited sockets

    /// What the kernel says about an inherited descriptor that is supposed to be a socket.
    public struct SocketDescription: Equatable {
        public var isSocket: Bool
        public var isStream: Bool
        public var isListening: Bool
        public var isUnix: Bool
        /// The bound path of a Unix socket (`@name` for the abstract namespace), if any.
        public var path: String?
    }

    /// Describes `fd`; nil when it is not open.
    public static func describeSocket(_ fd: Int32) -> SocketDescription? {
        var info = stat()
        guard fstat(fd, &info) == 0 else { return nil }
        guard UInt32(info.st_mode) & UInt32(S_IFMT) == UInt32(S_IFSOCK) else {
            return SocketDescription(isSocket: false, isStream: false, isListening: false, isUnix: false, path: nil)
        }
        func option(_ name: Int32) -> Int32 {
            var value: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            return getsockopt(fd, SOL_SOCKET, name, &value, &length) == 0 ? value : -1
        }
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) == 0 }
        }
        let isUnix = named && address.sun_family == sa_family_t(AF_UNIX)
        var path: String?
        if isUnix {
            let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
            let pathLength = Int(length) - pathOffset
            if pathLength > 0 {
                path = withUnsafeBytes(of: &address.sun_path) { raw in
                    let bytes = Array(raw.prefix(pathLength))
                    if bytes.first == 0 { return "@" + String(decoding: bytes.dropFirst(), as: UTF8.self) }
                    return String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
                }
            }
        }
        return SocketDescription(isSocket: true, isStream: option(SO_TYPE) == Int32(SOCK_STREAM.rawValue),
                                 isListening: option(SO_ACCEPTCONN) == 1, isUnix: isUnix, path: path)
    }
}
