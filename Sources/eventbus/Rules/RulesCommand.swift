import ArgumentParser
import ControlProtocol
import Foundation
import Glibc
import SystemCalls

/// `eventbus rules`: the running host's rules with their counters and last run; `eventbus rules
/// test`: which rules of a config would fire for an event, and what each would run.
struct RulesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rules",
        abstract: "List the running eventbusd's rules: mode, launcher, fired, runs by outcome, skipped, last run.",
        discussion: "Every run is on the bus as well: `eventbus tail 'rule.>' 'action.>'` follows them (docs/rules.md).",
        subcommands: [List.self, Test.self],
        defaultSubcommand: List.self)

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "List the running eventbusd's rules (the default).")

        @Flag(help: "The host's rules response as one JSON object.")
        var json = false

        @OptionGroup var socket: SocketOptions

        func run() throws {
            let answer = try socket.ask(ControlRequest(.rules))
            if json {
                print(String(decoding: JSONWriter.line(answer).dropLast(), as: UTF8.self))
                return
            }
            let rules = try HostConnection.decode(answer, as: "rules") { if case .rules(let rules) = $0 { rules } else { nil } }
            print(rules.isEmpty ? "no rules configured" : RulesCommand.table(rules))
        }
    }

    struct Test: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "test",
            abstract: "Say which rules of a config would fire for an event and what each would run, without running anything.",
            discussion: """
                Reads the config and its rules.d/ as eventbusd would (same checks), then matches the event against each \
                rule's patterns and where: conditions and shows each action with its templates filled in: every argument \
                of a command quoted, so you see exactly where each one starts and ends.

                Example: eventbus rules test --config /etc/eventbus/eventbus.yaml --event 'fs.closed path=/etc/nginx/nginx.conf'
                """)

        @Option(help: "The config file (its rules.d/ folder is read too).")
        var config = "/etc/eventbus/eventbus.yaml"

        @Option(help: ArgumentHelp("The event: its name, then FIELD=VALUE pairs (typed as for `eventbus post`: int, bool, string).", valueName: "NAME [FIELD=VALUE…]"))
        var event: String

        func run() throws {
            let daemon = RulesCommand.daemonPath()
            let arguments = [daemon, "--config", config, "--test-rules", event]
            let pid: pid_t
            do { pid = try System.spawn(daemon, arguments: arguments) } catch {
                throw CommandError("cannot run \(daemon): \(error.reason) (rules test reads the config with eventbusd)")
            }
            let status = (try? System.waitForExit(of: pid)) ?? 0
            let exited = status & 0x7f == 0
            throw ExitCode(exited ? (status >> 8) & 0xff : 1)
        }
    }

    /// eventbusd beside this program (a build folder, /usr/bin), else the one on PATH.
    static func daemonPath() -> String {
        if let me = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            let beside = (me as NSString).deletingLastPathComponent + "/eventbusd"
            if System.isAccessible(beside, .executable) { return beside }
        }
        for folder in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin").split(separator: ":") {
            let candidate = "\(folder)/eventbusd"
            if System.isAccessible(candidate, .executable) { return candidate }
        }
        return "/usr/bin/eventbusd"
    }

    /// One row per rule, columns aligned; a failed rule's reason below it.
    static func table(_ rules: [RuleReport]) -> String {
        let header = ["NAME", "STATE", "MODE", "LAUNCHER", "FIRED", "RUNS", "OK", "FAILED", "TIMEOUT", "SKIPPED", "RUNNING", "LAST RUN"]
        var rows = [header]
        var notes: [Int: String] = [:]
        for rule in rules {
            let last = rule.lastOutcome.map { outcome in "\(outcome)\(rule.lastRunTime.map { " at \($0)" } ?? "")" } ?? "-"
            rows.append([rule.name, rule.state, rule.mode, rule.launcher, "\(rule.fired)", "\(rule.runs)", "\(rule.succeeded)",
                         "\(rule.failed)", "\(rule.timedOut)", "\(rule.skipped + rule.dropped)",
                         "\(rule.running)" + (rule.queued > 0 ? " (+\(rule.queued) queued)" : ""), last])
            if let reason = rule.reason { notes[rows.count - 1] = reason }
        }
        let widths = header.indices.map { column in rows.map { $0[column].count }.max()! }
        var lines: [String] = []
        for (index, row) in rows.enumerated() {
            let cells = row.enumerated().map { column, cell in
                column == row.count - 1 ? cell : cell.padding(toLength: widths[column], withPad: " ", startingAt: 0)
            }
            lines.append(cells.joined(separator: "  "))
            if let note = notes[index] { lines.append("  └ " + note) }
        }
        return lines.joined(separator: "\n")
    }
}
