import SystemCalls

/// The runner's log: lines on standard error, which systemd gives the journal, each with its
/// syslog priority as a `<N>` prefix (`SyslogLevelPrefix=`, on by default) so `journalctl -p`
/// tells refusals from routine runs. One line per write, from any thread.
enum RunnerLog {
    static func info(_ message: String) { write(6, message) }
    static func warning(_ message: String) { write(4, message) }
    static func error(_ message: String) { write(3, message) }

    private static func write(_ priority: Int, _ message: String) {
        System.writeToStandardError("<\(priority)>\(message.replacingOccurrences(of: "\n", with: " "))\n")
    }
}
