import EventBusKit
import EventFieldCoding
import Foundation
import Glibc
@testable import NATSBridge
import Testing
import TestSupport

/// What another host (or anyone who can publish under the prefix) sends is held to the rules of
/// a local post: a name the control socket would refuse, or text that is not UTF-8, is refused
/// on import — counted (`malformed`) and announced (`bridge.gap`, kind `import_refused`, one per
/// quarter second however many, and a log line with it), never posted as it is.
@Suite(.enabled(if: NATSServer.isInstalled, "nats-server is not installed (apt-get install nats-server)"), .tags(.nats), .skippable(.nats))
struct BridgeRefusedImportTests {
    @Test func importsObeyTheNameRulesOfALocalPostAndRefusalsAreAnnounced() async throws {
        let directory = try TemporaryDirectory("bridge-refused")
        let server = try NATSServer(storage: directory.path)
        let bus = Bus()
        var config = BridgeConfig(servers: [server.url], host: "beta")
        config.import = [try EventPattern("app.>")]
        let bridge = try startBridge(config, bus, directory)
        defer { bridge.stop() }
        let (received, subscription) = try collect(bus, ">")
        defer { subscription.cancel() }

        func payload(_ fields: [String: FieldValue]) -> [UInt8] {
            var writer = FieldWriter()
            WireFormat.encode(Event(name: "unused", source: "remote-source", fields: fields), instance: 9, into: &writer)
            return writer.bytes
        }
        let good = payload(["n": .int(1)])
        /// A payload whose one string field has `key` and `value` as raw bytes.
        func raw(key: [UInt8], value: [UInt8]) -> [UInt8] {
            var bytes = payload([:])
            bytes.removeLast()  // the field count, 0
            bytes.append(1)
            bytes.append(UInt8(key.count))
            bytes += key
            bytes.append(1)  // string
            bytes.append(UInt8(value.count))
            bytes += value
            return bytes
        }
        let prefix = Array("eventbus.alpha.app.".utf8)
        let bad: [(subject: [UInt8], payload: [UInt8])] = [
            (prefix + Array("*".utf8), good),
            (prefix + Array("x.>".utf8), good),
            // (An empty token, `a..b`, nats-server itself does not deliver.)
            (prefix + [0x1B] + Array("[2J".utf8), good),  // a terminal escape
            (prefix + [0x66, 0xFF, 0xFE], good),  // not UTF-8
            (prefix + Array(String(repeating: "t", count: 100).utf8) + [0x7F], good),  // DEL
            (prefix + Array("good".utf8), raw(key: Array("k".utf8), value: [0xC3, 0x28])),  // a value not UTF-8
            (prefix + Array("good".utf8), raw(key: [0xFF], value: Array("v".utf8))),  // a key not UTF-8
            (prefix + Array("good".utf8), [0xDE, 0xAD]),  // not a payload at all
        ]
        let publisher = try RawNATSPublisher(port: server.port)
        // Repeated: the first round may reach the server before the bridge's subscription.
        #expect(await eventually {
            try? publisher.publish(prefix + Array("warm".utf8), good)
            return received.value.contains { $0.name == "app.warm" }
        })
        let before = bridge.statistics.malformed
        let rounds = 5
        for _ in 0..<rounds {
            for (subject, payload) in bad { try publisher.publish(subject, payload) }
        }
        try publisher.publish(prefix + Array("after".utf8), good)
        #expect(await eventually { received.value.contains { $0.name == "app.after" } })

        let refused = UInt64(bad.count * rounds)
        #expect(await eventually { bridge.statistics.malformed - before == refused }, "\(bridge.statistics)")
        // Announced, in a few events however many were refused, with the exact count.
        func announced() -> [BridgeGap] { received.value.compactMap(BridgeGap.init).filter { $0.kind.rawValue == "import_refused" } }
        #expect(await eventually { announced().reduce(0) { $0 + ($1.dropped ?? 0) } == Int(refused) },
                "announced: \(announced())")
        #expect(announced().count <= 4)
        #expect(announced().first?.subjects.isEmpty == false)
        // Nothing the bus would refuse from a local poster was posted.
        let imported = received.value.filter { $0.origin != nil }
        #expect(Set(imported.map(\.name)) == ["app.warm", "app.after"], "\(imported.map(\.name))")
        for event in imported {
            #expect(!event.fields.keys.contains { $0.contains("\u{FFFD}") })
        }
    }
}

/// A NATS client that writes the protocol by hand, so a test can publish what nats.c would not:
/// subjects with wildcards, control bytes or bytes that are not UTF-8.
final class RawNATSPublisher {
    private let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        var timeout = timeval(tv_sec: 30, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        _ = try readUntil("\r\n")  // INFO
        try write(Array("CONNECT {\"verbose\":false,\"pedantic\":false}\r\n".utf8))
    }

    deinit { close(fd) }

    /// Publishes, then waits for the server's PONG: the message has been taken by then.
    func publish(_ subject: [UInt8], _ payload: [UInt8]) throws {
        try write(Array("PUB ".utf8) + subject + Array(" \(payload.count)\r\n".utf8) + payload + Array("\r\nPING\r\n".utf8))
        let answer = try readUntil("PONG\r\n")
        if answer.contains("-ERR") { throw POSIXError(.EPROTO) }
    }

    /// Publishes `messages` in one write, as fast as the socket takes them, then waits for the
    /// server's PONG: every one has been taken by then.
    func publish(_ messages: [(subject: [UInt8], payload: [UInt8])]) throws {
        var bytes: [UInt8] = []
        for (subject, payload) in messages {
            bytes += Array("PUB ".utf8) + subject + Array(" \(payload.count)\r\n".utf8) + payload + Array("\r\n".utf8)
        }
        try write(bytes + Array("PING\r\n".utf8))
        let answer = try readUntil("PONG\r\n")
        if answer.contains("-ERR") { throw POSIXError(.EPROTO) }
    }

    private func write(_ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let count = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { throw POSIXError(.EPIPE) }
            sent += count
        }
    }

    private func readUntil(_ end: String) throws -> String {
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !text.hasSuffix(end) {
            let count = recv(fd, &buffer, 1, 0)
            guard count > 0 else { throw POSIXError(.ECONNRESET) }
            text += String(decoding: buffer[0..<count], as: UTF8.self)
            if text.hasPrefix("-ERR") && text.hasSuffix("\r\n") { return text }
        }
        return text
    }
}
