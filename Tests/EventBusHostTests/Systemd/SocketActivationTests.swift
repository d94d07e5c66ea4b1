@testable import EventBusHost
import Foundation
import Testing

/// Socket activation: descriptors from `LISTEN_FDS`, checked and named; and the real eventbusd
/// started by `systemd-socket-activate` with a bound control socket as descriptor 3.
@Suite(.tags(.realDaemon), .skippable(.realDaemon)) struct SocketActivationTests {
    /// A listening Unix stream socket bound at `path`.
    static func listeningSocket(at path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(fd, 16) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return fd
    }

    /// A client connected to the Unix stream socket at `path` (nil if `connect` failed).
    /// Reads wait at most a minute: a bound for a broken test only.
    private final class Client {
        let fd: Int32

        init?(connectingTo path: String) {
            fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
            let connected = withUnsafePointer(to: &address) { [fd] in
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard connected == 0 else {
                close(fd)
                return nil
            }
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }

        /// The first line the server sends.
        func firstLine() -> String {
            var bytes: [UInt8] = []
            var byte: UInt8 = 0
            while recv(fd, &byte, 1, 0) == 1, byte != UInt8(ascii: "\n") { bytes.append(byte) }
            return String(decoding: bytes, as: UTF8.self)
        }

        deinit { close(fd) }
    }

    /// Socket activation's variables for one descriptor passed to this process.
    private static func variables(names: String? = nil, pid: Int32 = getpid()) -> [String: String] {
        var result = ["LISTEN_FDS": "1", "LISTEN_PID": "\(pid)"]
        result["LISTEN_FDNAMES"] = names
        return result
    }

    @Test func takesTheNamedListeningSocketAndMarksItCloseOnExec() throws {
        let directory = try TemporaryDirectory()
        let path = directory.path + "/control.sock"
        let fd = try Self.listeningSocket(at: path)
        defer { close(fd) }
        #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC == 0)
        let activation = SocketActivation(Self.variables(names: "control"), processID: getpid(), firstDescriptor: fd)
        #expect(activation.problem(takingListenerNamed: "control") == nil)
        let socket = try #require(activation.takeListener(named: "control"))
        #expect(socket == SocketActivation.InheritedSocket(fileDescriptor: fd, name: "control", path: path, isListeningUnixStream: true))
        #expect(fcntl(fd, F_GETFD) & FD_CLOEXEC != 0)
        // Taken once: the control server owns it now.
        #expect(activation.takeListener(named: "control") == nil)
    }

    @Test func refusesSocketsForAnotherProcessOtherNamesAndNonListeners() throws {
        let directory = try TemporaryDirectory()
        let fd = try Self.listeningSocket(at: directory.path + "/control.sock")
        defer { close(fd) }
        // LISTEN_PID of another process: the variables were inherited, not meant for us.
        let inherited = SocketActivation(Self.variables(pid: 1), processID: getpid(), firstDescriptor: fd)
        #expect(inherited.sockets.isEmpty)
        #expect(inherited.takeListener(named: "control") == nil)
        #expect(inherited.problem(takingListenerNamed: "control")?.contains("LISTEN_PID=1 is not this process") == true)

        let otherName = SocketActivation(Self.variables(names: "metrics"), processID: getpid(), firstDescriptor: fd)
        #expect(otherName.takeListener(named: "control") == nil)
        #expect(otherName.problem(takingListenerNamed: "control") == "no inherited socket named 'control' among fd \(fd) 'metrics'")

        // No names, or systemd's default name (the socket unit's): the only socket is ours.
        let unnamed = SocketActivation(Self.variables(), processID: getpid(), firstDescriptor: fd)
        #expect(unnamed.takeListener(named: "control")?.fileDescriptor == fd)
        let unitNamed = SocketActivation(Self.variables(names: "eventbusd.socket"), processID: getpid(), firstDescriptor: fd)
        #expect(unitNamed.takeListener(named: "control")?.fileDescriptor == fd)

        let mismatched = SocketActivation(Self.variables(names: "a:b"), processID: getpid(), firstDescriptor: fd)
        #expect(mismatched.problem(takingListenerNamed: "control") == "socket activation ignored: LISTEN_FDNAMES has 2 name(s) for 1 descriptor(s)")

        // A datagram socket is not something a control server can accept on.
        let datagram = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(datagram) }
        let notListening = SocketActivation(Self.variables(), processID: getpid(), firstDescriptor: datagram)
        #expect(notListening.takeListener(named: "control") == nil)
        #expect(notListening.problem(takingListenerNamed: "control") == "inherited fd \(datagram) is not a listening Unix stream socket")
    }

    /// The real launcher: `systemd-socket-activate` binds the socket, waits for the first
    /// client, then execs eventbusd in its own process (so `LISTEN_PID` is eventbusd's pid) with
    /// the socket as descriptor 3. eventbusd adopts it and its control server serves it: the
    /// client that was waiting in the backlog and a later one both get the server's hello.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-socket-activate")))
    func eventbusdServesTheControlSocketFromSystemdSocketActivate() async throws {
        let directory = try TemporaryDirectory()
        let configPath = try directory.writeDaemonConfig("shutdown_timeout: 5s\n")
        let socketPath = directory.path + "/control.sock"
        let daemon = try SpawnedProcess(
            ["/usr/bin/systemd-socket-activate", "--listen", socketPath, "--fdname", "control",
             BuildProducts.eventbusd, "--config", configPath],
            environment: environment(with: [:]), outputPath: directory.path + "/eventbusd.log")

        #expect(await eventually { daemon.output.contains("Listening on \(socketPath) as 3.") }, "\(daemon.output)")
        // The first client is what makes systemd-socket-activate start eventbusd.
        let first = try #require(Client(connectingTo: socketPath))
        #expect(await eventually {
            daemon.output.contains("socket activation: adopted fd 3 listening on \(socketPath) as the control socket")
        }, "\(daemon.output)")
        let hello = first.firstLine()
        #expect(hello.contains("\"type\":\"hello\""), "\(hello)\n\(daemon.output)")
        #expect(await eventually { daemon.output.contains("ready; SIGHUP reloads") }, "\(daemon.output)")
        // eventbusd (same pid as the launcher) holds descriptor 3; it did not bind a socket of
        // its own.
        let descriptor = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(daemon.pid)/fd/3")
        #expect(descriptor.hasPrefix("socket:"))
        let second = try #require(Client(connectingTo: socketPath))
        #expect(second.firstLine().contains("\"type\":\"hello\""))
        #expect(!daemon.output.contains("not using it"))

        daemon.signal(SIGTERM)
        #expect(await daemon.exitStatus() == 0, "\(daemon.output)")
    }
}
