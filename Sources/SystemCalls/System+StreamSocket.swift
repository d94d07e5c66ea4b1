import Glibc

extension System {
    /// The libc calls of the control socket: a listening Unix stream socket, its clients and
    /// their credentials. Kept with ``System`` for the same reason as the rest: `errno` is read
    /// right after the call that set it, and everything above works with Swift values.
    enum StreamSocket {
        /// `sizeof(sun_path)`: a socket path must be shorter (it is stored NUL-terminated).
        static let maximumPathLength = MemoryLayout.size(ofValue: sockaddr_un().sun_path)

        /// What is at a socket path before the host binds it.
        enum Occupant: Equatable {
            case nothing
            /// A socket file that nobody accepts on (`ECONNREFUSED`): left by a host that died.
            case staleSocket
            /// A host is accepting there.
            case liveSocket
            /// Something that is not a socket: never removed.
            case otherFile
        }

        static func occupant(of path: String) throws(CallError) -> Occupant {
            var info = stat()
            guard lstat(path, &info) == 0 else {
                if errno == ENOENT { return .nothing }
                throw CallError(call: "lstat", path: path, errno: errno)
            }
            guard UInt32(info.st_mode) & UInt32(S_IFMT) == UInt32(S_IFSOCK) else { return .otherFile }
            let probe = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard probe >= 0 else { throw CallError(call: "socket", path: path, errno: errno) }
            defer { Glibc.close(probe) }
            if withAddress(path, { connect(probe, $0, $1) }) == 0 { return .liveSocket }
            switch errno {
            case ECONNREFUSED: return .staleSocket
            case ENOENT: return .nothing  // removed meanwhile
            default: throw CallError(call: "connect", path: path, errno: errno)
            }
        }

        /// Creates the socket's folder when it is missing: mode 0750 and the tail group when one is
        /// configured (members must pass through it), else 0755. An existing folder is left as
        /// the administrator (or systemd's `RuntimeDirectory=`) made it.
        static func makeParentDirectory(of path: String, group: UInt32?) throws(CallError) {
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
        static func listen(at path: String, backlog: Int32 = 128) throws(CallError) -> Int32 {
            let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else { throw CallError(call: "socket", path: path, errno: errno) }
            guard withAddress(path, { bind(fd, $0, $1) }) == 0 else {
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

        /// Mode and group of the socket file; connecting needs write permission on it.
        static func setPermissions(of path: String, mode: mode_t, group: UInt32?) throws(CallError) {
            if let group, chown(path, uid_t.max, group) != 0 { throw CallError(call: "chown", path: path, errno: errno) }
            guard chmod(path, mode) == 0 else { throw CallError(call: "chmod", path: path, errno: errno) }
        }

        /// Makes an inherited listening socket non-blocking, as the accept loop needs.
        static func makeNonBlocking(_ fd: Int32) throws(CallError) {
            let flags = fcntl(fd, F_GETFL)
            guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
                throw CallError(call: "fcntl(F_SETFL)", path: "fd \(fd)", errno: errno)
            }
        }

        static func unlink(_ path: String) {
            _ = Glibc.unlink(path)
        }

        static func close(_ fd: Int32) {
            _ = Glibc.close(fd)
        }

        /// `accept4(2)`, looked up at run time: Swift's Glibc module does not declare it (it is a
        /// GNU extension), and plain `accept` + `fcntl` would leave a moment in which a process a
        /// module starts could inherit the client's descriptor.
        private static let accept4: @convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32 = {
            guard let symbol = dlsym(nil, "accept4") else { fatalError("glibc without accept4") }
            return unsafeBitCast(symbol, to: (@convention(c) (Int32, UnsafeMutablePointer<sockaddr>?, UnsafeMutablePointer<socklen_t>?, Int32) -> Int32).self)
        }()

        /// The next waiting client, non-blocking and close-on-exec; nil when none waits.
        static func accept(_ listener: Int32) throws(CallError) -> Int32? {
            while true {
                do {
                    return try call("accept4", "control socket") {
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
        static func openSpare() -> Int32 {
            open("/dev/null", O_RDONLY | O_CLOEXEC)
        }

        /// Who is at the other end, as the kernel recorded it when the client connected.
        struct Peer: Sendable, Equatable {
            var processID: Int32
            var userID: UInt32
            var groupID: UInt32
            /// Supplementary groups.
            var groups: [UInt32]
        }

        /// `SO_PEERCRED` and `SO_PEERGROUPS` (Linux 4.13+).
        ///
        /// Why `SO_PEERGROUPS` rather than `/proc/PID/status` or `getgrouplist`: it is the
        /// client's groups captured by the kernel at `connect`, so a client that exits and whose
        /// pid is reused cannot lend another process's groups, and group changes made to the
        /// user after the process started do not count — the kernel's own view, as for file access.
        static func peer(of fd: Int32) throws(CallError) -> Peer {
            // `struct ucred` (pid, uid, gid), which the Glibc module does not export without _GNU_SOURCE.
            struct Credentials { var pid: Int32 = 0; var uid: UInt32 = 0; var gid: UInt32 = 0 }
            var credentials = Credentials()
            var length = socklen_t(MemoryLayout<Credentials>.size)
            guard getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) == 0 else {
                throw CallError(call: "getsockopt(SO_PEERCRED)", path: "control client", errno: errno)
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
                    throw CallError(call: "getsockopt(SO_PEERGROUPS)", path: "control client", errno: errno)
                }
                groups = [UInt32](repeating: 0, count: max(groups.count * 2, Int(size) / MemoryLayout<UInt32>.size))
            }
            return Peer(processID: credentials.pid, userID: credentials.uid, groupID: credentials.gid, groups: groups)
        }

        enum ReadResult {
            case bytes(Int)
            case wouldBlock
            /// The client closed its end (or reset the connection).
            case end
        }

        static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(CallError) -> ReadResult {
            do {
                let got = try call("read", "control client") { Glibc.read(fd, buffer.baseAddress, buffer.count) }
                return got == 0 ? .end : .bytes(got)
            } catch {
                switch error.errno {
                case EAGAIN: return .wouldBlock
                case ECONNRESET: return .end
                default: throw error
                }
            }
        }

        enum WriteResult {
            case wrote(Int)
            case wouldBlock
            /// The client is gone (`EPIPE`, `ECONNRESET`).
            case closed
        }

        /// `send` with `MSG_NOSIGNAL`: a client that went away must not kill the host with SIGPIPE.
        static func write(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(CallError) -> WriteResult {
            do {
                return .wrote(try call("send", "control client") { Glibc.send(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL)) })
            } catch {
                switch error.errno {
                case EAGAIN: return .wouldBlock
                case EPIPE, ECONNRESET: return .closed
                default: throw error
                }
            }
        }

        /// The id of group `name`, from the system's group database (`getgrnam_r`).
        static func groupID(named name: String) -> UInt32? {
            var group = Glibc.group()
            var result: UnsafeMutablePointer<Glibc.group>?
            var scratch = [CChar](repeating: 0, count: 16_384)
            guard getgrnam_r(name, &group, &scratch, scratch.count, &result) == 0, result != nil else { return nil }
            return group.gr_gid
        }

        private static func withAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
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
