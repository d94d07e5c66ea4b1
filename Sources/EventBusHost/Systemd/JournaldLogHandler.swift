import Logging

/// A swift-log handler that writes each message to journald as a structured entry, so
/// `journalctl` can filter on it: `journalctl -u eventbusd EVENTBUS_MODULE=hello -p warning`.
///
/// Fields: `MESSAGE`; `PRIORITY` (syslog's 0–7, from the level); `SYSLOG_IDENTIFIER`;
/// `EVENTBUS_MODULE` for a module's log (metadata `module`); `CODE_FILE`, `CODE_LINE`,
/// `CODE_FUNC`; `ERROR` when an error was logged; and every other metadata key, upper-cased, as
/// its own field (see ``fieldName(forMetadataKey:)``).
///
/// ## Threads
/// `log(event:)` runs on the logging thread and only encodes and hands the entry to the
/// ``JournaldWriter``, which never blocks it.
public struct JournaldLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public var metadataProvider: Logger.MetadataProvider?
    private let writer: JournaldWriter

    public init(writer: JournaldWriter, metadataProvider: Logger.MetadataProvider? = LoggingSystem.metadataProvider) {
        self.writer = writer
        self.metadataProvider = metadataProvider
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { $1 } }
        if let explicit = event.metadata { merged.merge(explicit) { $1 } }
        let priority = Self.priority(of: event.level)
        let message = event.message.description
        var fields: [(name: String, value: String)] = [
            ("MESSAGE", message),
            ("PRIORITY", String(priority)),
            ("SYSLOG_IDENTIFIER", writer.identifier),
            ("CODE_FILE", event.file),
            ("CODE_LINE", String(event.line)),
            ("CODE_FUNC", event.function),
        ]
        if let error = event.error { fields.append(("ERROR", "\(error)")) }
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) {
            guard let name = Self.fieldName(forMetadataKey: key) else { continue }
            fields.append((name, "\(value)"))
        }
        writer.write(fields: fields, priority: priority, message: message)
    }

    /// syslog priorities, as journald stores them: 2 critical … 7 debug (swift-log's `trace`
    /// has no syslog level below debug).
    static func priority(of level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: return 7
        case .info: return 6
        case .notice: return 5
        case .warning: return 4
        case .error: return 3
        case .critical: return 2
        }
    }

    /// Fields this handler sets itself: metadata cannot overwrite them.
    private static let ownFields: Set = ["MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "CODE_FUNC", "ERROR", "EVENTBUS_MODULE"]

    /// The journal field for a metadata key: `module` is `EVENTBUS_MODULE`; any other key is
    /// upper-cased with every character outside `A–Z`, `0–9` made `_`, because journald accepts
    /// only such names and drops the whole entry otherwise. A name journald would reject
    /// (leading `_` marks fields only journald may set; a leading digit) or one this handler
    /// sets itself gets the prefix `EVENTBUS_`. Names are cut at journald's 64 characters. Nil
    /// for a key with nothing usable in it.
    static func fieldName(forMetadataKey key: String) -> String? {
        if key == "module" { return "EVENTBUS_MODULE" }
        var name = String(String.UnicodeScalarView(key.uppercased().unicodeScalars.map { scalar in
            (scalar >= "A" && scalar <= "Z") || (scalar >= "0" && scalar <= "9") ? scalar : "_"
        }))
        guard name.contains(where: { $0 != "_" }) else { return nil }
        if name.hasPrefix("_") || name.first!.isNumber || ownFields.contains(name) {
            name = "EVENTBUS_" + name
        }
        return String(name.prefix(64))
    }
}
