import Foundation
import ModuleIsolation
import ModuleLoading
import SystemCalls

/// The keys of an exec module's entry (docs/modules-any-language.md):
///
/// ```yaml
/// modules:
///   disk-report:
///     exec: ["/usr/lib/eventbus/modules/disk_report.py", "--verbose"]
///     subscribe: ["user.disk.*", "unit.state active=failed"]
///     posts_per_second: 1000
///     config: { threshold: 90 }
/// ```
///
/// `exec:` takes `path:`'s place; the program runs as a worker does (`isolation: process`, its
/// `worker:` limits and restart policy, its mailbox keys), so `isolation: none` and a
/// `heartbeat_timeout` (a program sends no heartbeat) are refused rather than ignored.
extension HostConfig {
    /// The keys only an exec module has.
    static let execKeys = ["exec", "subscribe", "posts_per_second"]

    /// Reads the exec keys of a module's `fields` into `entry`; the program's path, relative to
    /// `directory` when not absolute, becomes the entry's `path` (what trust and reload compare).
    static func parseExec(_ fields: [String: ConfigNode], into entry: inout ModuleEntry, directory: String) throws(ConfigError) {
        guard let execNode = fields["exec"] else {
            if let key = execKeys.first(where: { fields[$0] != nil }) {
                throw fields[key]!.error("only an exec module (one with exec:) has \(key)")
            }
            return
        }
        if let path = fields["path"] { throw path.error("a module has either path (a .so) or exec (a program), not both") }
        var program: [String] = []
        for item in try execNode.sequence() { program.append(try item.string()) }
        guard let first = program.first, !first.isEmpty else {
            throw execNode.error("exec is the program and its arguments, such as [\"/usr/lib/eventbus/modules/report.py\", \"--verbose\"]")
        }
        program[0] = absolute(first, relativeTo: directory)
        var settings = ExecSettings(program: program)
        for item in try fields["subscribe"]?.sequence() ?? [] {
            do {
                settings.subscriptions.append(try ExecSubscription(parsing: try item.string()))
            } catch let error as ExecSubscription.ParseError {
                throw item.error(error.description)
            } catch let error as ConfigError {
                throw error
            } catch {
                throw item.error("\(error)")
            }
        }
        if let rate = fields["posts_per_second"] { settings.postsPerSecond = try rate.int(atLeast: 1) }
        if let isolation = fields["isolation"], try parseIsolation(isolation) == .none {
            throw isolation.error("an exec module's program always runs in a process of its own (isolation: process)")
        }
        if let worker = fields["worker"], let heartbeat = try worker.mapping().first(where: { $0.key == "heartbeat_timeout" }) {
            throw heartbeat.value.error("an exec module's program sends no heartbeat; a program that stops reading shows as stalled instead")
        }
        entry.path = program[0]
        entry.exec = settings
        entry.isolation = .process
        entry.isolationFromHost = false
    }

    /// Why an exec module's program may not run (nil: it may): the trust a module's file needs
    /// (``FileTrust``: owned by root or the host's user, not writable by others, nor any
    /// directory above it), and that it is a file the host may execute.
    static func execProblem(_ settings: ExecSettings) -> String? {
        let path = settings.program[0]
        do {
            try FileTrust.check(path)
        } catch {
            switch error {
            case .missing(let error): return "cannot run \(path): \(error.reason)"
            case .untrusted(let reason): return "program refused: \(reason)"
            }
        }
        guard let status = try? System.status(of: path), status.isRegularFile else { return "cannot run \(path): it is not a regular file" }
        guard System.isAccessible(path, .executable) else { return "cannot run \(path): it is not executable (chmod +x)" }
        return nil
    }
}
