import Logging

/// Where eventbusd's log goes: journald with structured fields when systemd connected its
/// standard error to the journal, readable lines on standard error otherwise.
public enum HostLogging {
    /// The identifier journald files eventbusd's entries under (`journalctl -t eventbusd`).
    public static let identifier = "eventbusd"

    /// Whether standard error is the journal stream systemd set up: `$JOURNAL_STREAM` holds
    /// that stream's `device:inode`, and it must be standard error's own — a program started
    /// from a journald-logged shell inherits the variable but may have its standard error
    /// redirected elsewhere (systemd.exec(5), "$JOURNAL_STREAM").
    static func standardErrorIsJournal(journalStream: String?) -> Bool {
        guard let journalStream,
              let separator = journalStream.firstIndex(of: ":"),
              let device = UInt64(journalStream[..<separator]),
              let inode = UInt64(journalStream[journalStream.index(after: separator)...]),
              let standardError = System.deviceAndInode(of: 2)
        else { return false }
        return standardError.device == device && standardError.inode == inode
    }

    /// Sets up swift-log for the process: ``JournaldLogHandler`` when standard error is the
    /// journal and journald's socket takes datagrams (its path from
    /// `$EVENTBUS_JOURNAL_SOCKET`, by default journald's own), `StreamLogHandler` on standard
    /// error otherwise — with a note on standard error when the journal was wanted but not
    /// reachable. Returns the writer to flush at exit, if the journal was chosen.
    public static func bootstrap(level: Logger.Level) -> JournaldWriter? {
        let writer = journalWriterIfWanted()
        LoggingSystem.bootstrap { label in
            if let writer {
                var handler = JournaldLogHandler(writer: writer)
                handler.logLevel = level
                return handler
            }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        return writer
    }

    private static func journalWriterIfWanted() -> JournaldWriter? {
        guard standardErrorIsJournal(journalStream: System.environment("JOURNAL_STREAM")) else { return nil }
        let path = System.environment(JournaldWriter.socketPathVariable) ?? JournaldWriter.defaultSocketPath
        do {
            return try JournaldWriter(socketPath: path, identifier: identifier)
        } catch {
            System.writeToStandardError("<4>journald does not take entries at \(path) (\(error)); logging to standard error\n")
            return nil
        }
    }
}
