import Foundation

/// `count` different loopback TCP ports nobody listens on now, for a server a test starts.
///
/// Below the kernel's ephemeral range (`ip_local_port_range`). Why not port 0's choice: the
/// kernel takes that from the ephemeral range, which every outgoing connection of the suite
/// draws from too, and between the probe and the server's bind one of them took the port
/// ("address already in use", in a loaded run of the whole suite). Below the range only another
/// listener could take it. Each port is held bound until all are picked, so they differ, and no
/// port is handed out twice in one test process: two tests probing at once could otherwise both
/// pick a port that neither has bound yet.
public func freeLoopbackPorts(_ count: Int) throws -> [Int] {
    let ephemeralStart = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8))?
        .split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32_768
    var held: [Int32] = []
    defer { held.forEach { close($0) } }
    var ports: [Int] = []
    for _ in 0..<(1_000 * count) where ports.count < count {
        let port = Int.random(in: 10_000..<max(10_001, ephemeralStart))
        guard handedOut.update({ $0.insert(port).inserted }) else { continue }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        if bound {
            held.append(fd)
            ports.append(port)
        } else {
            close(fd)
        }
    }
    guard ports.count == count else { throw POSIXError(.EADDRINUSE) }
    return ports
}

/// One port of ``freeLoopbackPorts(_:)``.
public func freeLoopbackPort() throws -> Int {
    try freeLoopbackPorts(1)[0]
}

private let handedOut = Collected<Set<Int>>([])
