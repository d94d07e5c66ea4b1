import ControlProtocol
import Foundation
import ModuleIsolation
#if canImport(Glibc)
import Glibc
import ModuleLoading
#endif

/// `--mode check`: one module of `eventbusd --check-config` (``LoadCheck`` on the host's side).
/// Reads the request from the socket, loads the module with the host's loader — the preflight,
/// `dlopen`, the entry and its export record with the ABI check, as a starting host or worker
/// does — checks the section against the keys the module declares, answers and returns. No
/// module instance is made and nothing is activated: a module's `init` and `activate` are its
/// start's business, the load is what can kill a process before any of it.
enum LoadCheckMode {
    /// The exit status: 0 once answered (a refusal is an answer too).
    static func run(socket: Int32) -> Int32 {
        guard let text = readToEnd(socket),
              let json = try? JSON.parse(String(decoding: text, as: UTF8.self)),
              let request = LoadCheckWire.Request(json: json) else {
            fail("no readable check request on fd \(socket); this mode is started by eventbusd --check-config", status: 65)
        }
        let reply: LoadCheckWire.Reply
        do {
            let library = try ModuleLoader().load(request.path)
            let keys = library.configKeys
            reply = .loaded(resolvedPath: library.resolvedPath, declaresKeys: keys.isDeclared,
                            problems: keys.check(request.config.values), keysSummary: keys.summary)
        } catch {
            reply = .refused(error.description)
        }
        return writeAll(socket, JSONWriter.line(reply.json)) ? 0 : 74
    }

    private static func readToEnd(_ socket: Int32) -> [UInt8]? {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(socket, &buffer, buffer.count)
            if count > 0 {
                bytes += buffer[0..<count]
            } else if count == 0 {
                return bytes
            } else if errno != EINTR {
                return nil
            }
        }
    }

    private static func writeAll(_ socket: Int32, _ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let written = bytes.withUnsafeBytes { write(socket, $0.baseAddress! + sent, $0.count - sent) }
            if written > 0 {
                sent += written
            } else if written < 0 && errno != EINTR {
                return false
            }
        }
        return true
    }
}
