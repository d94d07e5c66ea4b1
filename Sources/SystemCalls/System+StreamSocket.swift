import Glibc

extension System {
    /// The libc calls of stream sockets: the control socket (a listening Unix socket, its clients
    /// and their credentials) and the metrics listener (TCP). Kept with ``System`` for the same
    /// reason as the rest: `errno` is read right after the call that set it, and everything
    /// above works with Swift values.
    public enum StreamSocket {
        /// `sizeof(sun_path)`: a socket path must be shorter (it is stored NUL-terminated).
        public static let maximumPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path)

        /// What is at a socket path before the host binds it.
        public enum Occupant: Equatable {
            case nothing
            /// A socket file that nobody accepts on (`ECONNREFUSED`): left by a host that died.
            case staleSocket
            /// A host is accepting there.
            case liveSocket
            /// Something that is not a socket: never removed.
            case otherFile
        }

        public static func occupant(of path: String) throws(CallError) -> Occupant {
            var info = stat()
            guard lstat(path, &info) == 0 else {
                if errno == ENOENT { return .nothing }
                throw CallError(call: "lstat", path: path, errno: errno)
            }
            guard UInt32(info.st_mode) & UInt32(S_IFMT) == UInt32(S_IFSOCK) else { return .otherFile }
            let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard probe >= 0 else { throw CallError(call: "socket", path: path, errno: errno) }
            defer { Glibc.close(probe) }
            if withAddress(path, { Glibc.connect(probe, $0, $1) }) == 0 { return .liveSocket }
            switch errno {
            case ECONNREFUSED: return .staleSocket
            case ENOENT: return .nothing  // removed meanwhile
            default: throw CallError(call: "connect", path: path, errno: errno)
            }
        }

        /// Creates the socket's folder when it is missing: mode 0750 and the tail group when one is
        /// configured (members must pass through it), else 0755. An existing folder is left as
        /// the administrator (or systemd's `RuntimeDirectory=`) made it.
        public static func makeParentDirectory(of path: String, group: UInt32?) throws(CallError) {
            let parent = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
            guard !parent.isEmpty else { return }
            var info = stat()
            if stat(parent, &info) == 0 { return }
            try makeParentDirectory(of: parent, group: nil)
            let mode: mode_t = group == nil ? 0o755 : 0o750
            guard mkdir(parent, mode) == 0 || errno == EEXIST else { throw CallError(call: "mkdir", path: parent, errno: errno) }
            guard chmod(parent, mode) == 0 else { throw CallError(call: "chmod", path: parent, errno: errno) }  // past the umask
            if let group, chown(parent, uid_t.max, group) != 0 { throw CallError(call: "chown", path: parent, errno: errno) }
        }

        /// A listening, non-blocking, close-on-exec socket bound at `path`.
        public static func listen(at path: String, backlog: Int32 = 128) throws(CallError) -> Int32 {
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else { throw CallError(call: "socket", path: path, errno: errno) }
            guard withAddress(path, { Glibc.bind(fd, $0, $1) }) == 0 else {
                let code = errno
                Glibc.close(fd)
                throw CallError(call: "bind", path: path, errno: code)
            }
            guard Glibc.listen(fd, backlog) == 0 else {
                let code = errno
                Glibc.close(fd)
                Glibc.unlink(path)
                throw CallError(call: "listen", path: path, errno: code)
            }
            return fd
        }

        /// A listening, non-blocking, close-on-exec TCP socket on `host` (a numeric IPv4 or IPv6
        /// address) and `port`, whose connections the kernel hands over only once they sent
        /// something or `silence` has passed (`TCP_DEFER_ACCEPT`, whole seconds).
        public static func listen(host: String, port: UInt16, ipv6: Bool, deferAccept silence: Int32,
                                  backlog: Int32) throws(CallError) -> Int32 {
            let place = ipv6 ? "[\(host)]:\(port)" : "\(host):\(port)"
            let fd = try call("socket", place) {
                socket(ipv6 ? AF_INET6 : AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            }
            do throws(CallError) {
                var one: Int32 = 1
                _ = try call("setsockopt(SO_REUSEADDR)", place) { setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size)) }
                var seconds = max(1, silence)
                _ = try call("setsockopt(TCP_DEFER_ACCEPT)", place) {
                    setsockopt(fd, Int32(IPPROTO_TCP), TCP_DEFER_ACCEPT, &seconds, socklen_t(MemoryLayout<Int32>.size))
                }
                if ipv6 {
                    var address = sockaddr_in6()
                    address.sin6_family = sa_family_t(AF_INET6)
                    address.sin6_port = port.bigEndian
                    guard host.withCString({ inet_pton(AF_INET6, $0, &address.sin6_addr) }) == 1 else {
                        throw CallError(call: "inet_pton", path: place, errno: EINVAL)
                    }
                    try bind(ip: fd, to: &address, place)
                } else {
                    var address = sockaddr_in()
                    address.sin_family = sa_family_t(AF_INET)
                    address.sin_port = port.bigEndian
                    guard host.withCString({ inet_pton(AF_INET, $0, &address.sin_addr) }) == 1 else {
                        throw CallError(call: "inet_pton", path: place, errno: EINVAL)
                    }
                    try bind(ip: fd, to: &address, place)
                }
                _ = try call("listen", place) { Glibc.listen(fd, backlog) }
            } catch {
                Glibc.close(fd)
                throw error
            }
            return fd
        }

        /// Whether `host` is a numeric IPv4 (or, `ipv6`, IPv6) address, as ``listen(host:port:ipv6:deferAccept:backlog:)``
        /// takes it (`inet_pton`; names are not resolved).
        public static func isAddressLiteral(_ host: String, ipv6: Bool) -> Bool {
            var probe = in6_addr()
            return host.withCString { inet_pton(ipv6 ? AF_INET6 : AF_INET, $0, &probe) } == 1
        }

        /// `bind(2)` to an IPv4 or IPv6 socket address (`sockaddr_in`, `sockaddr_in6`).
        private static func bind<Address>(ip fd: Int32, to address: inout Address, _ place: String) throws(CallError) {
            let length = socklen_t(MemoryLayout<Address>.size)
            _ = try call("bind", place) {
                withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, length) } }
            }
        }

        /// Whether the kernel sent the connection's SYN-ACK again (`TCP_INFO`): for a connection
        /// handed over without data, that it waited out `TCP_DEFER_ACCEPT` (Linux retransmits
        /// the SYN-ACK at its end and hands the connection over on the client's ACK).
        public static func retransmittedHandshake(_ fd: Int32) -> Bool {
            var info = tcp_info()
            var length = socklen_t(MemoryLayout<tcp_info>.size)
            return getsockopt(fd, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 && info.tcpi_total_retrans > 0
        }

        /// Mode and group of the socket file; connecting needs write permission on it.
        public static func setPermissions(of path: String, mode: mode_t, group: UInt32?) throws(CallError) {
            if let group, chown(path, uid_t.max, group) != 0 { throw CallError(call: "chown", path: path, errno: errno) }
            guard chmod(path, mode) == 0 else { throw CallError(call: "chmod", path: path, errno: errno) }
        }

        /// Makes an inherited listening socket non-blocking, as the accept loop needs.
        public static func makeNonBlocking(_ fd: Int32) throws(CallError) {
            let flags = fcntl(fd, F_GETFL)
            guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
                throw CallError(call: "fcntl(F_SETFL)", path: "fd \(fd)", errno: errno)
            }
        }

        public static func unlink(_ path: String) {
            _ = Glibc.unlink(path)
        }

        public static func close(_ fd: Int32) {
            _ = Glibc.close(fd)
        }

        /// `accept4(2)`, looked up at run time: Swift's Glibc module does not declare it (it is a
        /// GNU extension), and plain `accept` + `fcntl` would leave a moment in which a process a
        /// module starts could inherit the client's descriptor.
        private static let accept4: @convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32 = {
            guard let symbol = dlsym(nil, "accept4") else { fatalError("glibc without accept4") }
            return unsafeBitCast(symbol, to: (@convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32).self)
        }()

        /// The next waiting client of `listener` (`what` names it in errors), non-blocking and
        /// close-on-exec; nil when none waits.
        public static func accept(_ listener: Int32, _ what: String) throws(CallError) -> Int32? {
            while true {
                do {
                    return try call("accept4", what) {
                        accept4(listener, nil, nil, Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue))
                    }
                } catch {
                    switch error.errno {
                    case ECONNABORTED: continue  // that client gave up while waiting: the next one
                    case EAGAIN: return nil
                    default: throw error
                    }
                }
            }
        }

        /// A descriptor held in reserve for when the process runs out of them (`/dev/null`,
        /// close-on-exec); -1 if even that cannot be opened.
        public static func openSpare() -> Int32 {
            open("/dev/null", O_RDONLY | O_CLOEXEC)
        }

        /// Who is at the other end, as the kernel recorded it when the client connected.
        public struct Peer: Sendable, Equatable {
            public var processID: Int32
            public var userID: UInt32
            public var groupID: UInt32
            /// Supplementary groups.
            public var groups: [UInt32]

            public init(processID: Int32, userID: UInt32, groupID: UInt32, groups: [UInt32]) {
                self.processID = processID
                self.userID = userID
                self.groupID = groupID
                self.groups = groups
            }
        }

        /// `SO_PEERCRED` and `SO_PEERGROUPS` (Linux 4.13+).
        ///
        /// Why `SO_PEERGROUPS` rather than `/proc/PID/status` or `getgrouplist`: it is the
        /// client's groups captured by the kernel at `connect`, so a client that exits and whose
        /// pid is reused cannot lend another process's groups, and group changes made to the
        /// user after the process started do not count — the kernel's own view, as for file access.
        public static func peer(of fd: Int32) throws(CallError) -> Peer {
            // `struct ucred` (pid, uid, gid), which the Glibc module does not export without _GNU_SOURCE.
            struct Credentials { var pid: Int32 = 0; var uid: UInt32 = 0; var gid: UInt32 = 0 }
            var credentials = Credentials()
            var length = socklen_t(MemoryLayout<Credentials>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else {
                throw CallError(call: "getsockopt(SO_PEERCRED)", path: "fd \(fd)", errno: errno)
            }
            let peerGroups: Int32 = 59  // SO_PEERGROUPS; Swift's Glibc module does not export it
            var groups = [UInt32](repeating: 0, count: 64)
            while true {
                var size = socklen_t(groups.count * MemoryLayout<UInt32>.size)
                if getsockopt(fd, SOL_SOCKET, peerGroups, &groups, &size) == 0 {
                    groups.removeLast(groups.count - Int(size) / MemoryLayout<UInt32>.size)
                    break
                }
                guard errno == ERANGE else {
                    throw CallError(call: "getsockopt(SO_PEERGROUPS)", path: "fd \(fd)", errno: errno)
                }
                groups = [UInt32](repeating: 0, count: max(groups.count * 2, Int(size) / MemoryLayout<UInt32>.size))
            }
            return Peer(processID: credentials.pid, userID: credentials.uid, groupID: credentials.gid, groups: groups)
        }

        public enum ReadResult {
            case bytes(Int)
            case wouldBlock
            /// The client closed its end (or reset the connection).
            case end
        }

        /// Reads what `fd` (`what` names its peer in errors) has, without blocking.
        public static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer, _ what: String) throws(CallError) -> ReadResult {
            do {
                let got = try call("read", what) { Glibc.read(fd, buffer.baseAddress, buffer.count) }
                return got == 0 ? .end : .bytes(got)
            } catch {
                switch error.errno {
                case EAGAIN: return .wouldBlock
                case ECONNRESET: return .end
                default: throw error
                }
            }
        }

        public enum WriteResult {
            case wrote(Int)
            case wouldBlock
            /// The client is gone (`EPIPE`, `ECONNRESET`).
            case closed
        }

        /// `send` with `MSG_NOSIGNAL`: a client that went away must not kill the host with SIGPIPE;
        /// and `MSG_DONTWAIT`: what the socket takes now, whether the descriptor blocks or not.
        public static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, _ what: String) throws(CallError) -> WriteResult {
            do {
                return .wrote(try call("send", what) { Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) })
            } catch {
                switch error.errno {
                case EAGAIN: return .wouldBlock
                case EPIPE, ECONNRESET: return .closed
                default: throw error
                }
            }
        }

        static func withAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            guard path.utf8.count < maximumPathLength else {
                errno = ENAMETOOLONG
                return -1
            }
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                raw.copyBytes(from: path.utf8)
                raw[path.utf8.count] = 0
            }
            return withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
        }
    }
}
