import ControlProtocol
import Foundation
import ModuleIsolation
import ModuleLoading
import SystemCalls

/// `--mode check`: one module of `eventbusd --check-config` (``LoadCheck`` on the host's side).
/// Reads the request from the socket, loads the module with the host's loader — the preflight,
/// `dlopen`, the entry and its export record with the ABI check, as a starting host or worker
/// does — checks the section against the keys the module declares, answers and returns. No
/// module instance is made and nothing is activated: a module's `init` and `activate` are its
/// start's business, the load is what can kill a process before any of it.
enum LoadCheckMode {
    /// The exit status: 0 once answered (a refusal is an answer too).
    static func run(socket: Int32) -> Int32 {
        guard let text = try? System.readToEnd(socket),
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
        do {
            try JSONWriter.line(reply.json).withUnsafeBytes { try System.writeAll(socket, $0) }
            return 0
        } catch {
            return 74
        }
    }
}
