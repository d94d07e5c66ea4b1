/// A change under a watched path, as module code reads it from an `fs.*` event.
///
/// Two families of events share this view:
/// - **changes** to one path (`created`, `modified`, `closedAfterWrite`, `deleted`, `attributes`,
///   `moved`): apply them in order and a subscriber's picture of the tree stays true;
/// - **notices** about the watch itself (`overflow`, `rescanned`, `error`, `rootDeleted`,
///   `rootRearmed`): they say when that picture may have gone stale and when it is whole again.
///
/// Nothing is lost silently: when the kernel drops events (its queue overflowed) the source says
/// so with an `overflow` notice, then reports what changed meanwhile (changes with origin
/// ``Origin/rescan``), then `rescanned`.
public struct FileChange: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// A file or directory appeared (made here, moved in from outside the watch, or found by a scan).
        case created
        /// A file's content was written (one event per `write`; see ``OpenCombine/Publisher/settle(for:scheduler:options:key:)``).
        case modified
        /// A file opened for writing was closed: the usual "the writer is done" signal.
        case closedAfterWrite
        /// A file or directory went away (removed, moved out of the watch, or missed by a rescan).
        case deleted
        /// Permissions, owner, timestamps, link count or extended attributes changed.
        case attributes
        /// Renamed within the watch: ``FileChange/oldPath`` → ``FileChange/path``. For a directory,
        /// everything under it moved too (no separate events for its contents).
        case moved
        /// The kernel's queue overflowed and events were dropped; a rescan follows.
        case overflow
        /// The rescan after an overflow is done: everything that changed has been reported. A
        /// subscriber that could not take it all (a `bus.gap` in its stream) becomes whole from
        /// the watch's ``FileListing`` instead.
        case rescanned
        /// The watch could not do everything asked: a kernel limit (see ``FileChange/limit``),
        /// a missing root, no permission… ``FileChange/message`` says what, and what to do.
        case error
        /// The watched root was deleted or moved away: no more events until it is re-armed.
        case rootDeleted
        /// The root exists again and is watched again (only when asked to re-arm); what it contains
        /// now follows as `created` events with origin ``Origin/scan``.
        case rootRearmed

        /// The bus event name: `fs.created`, `fs.closed`, `fs.root.deleted`…
        public var eventName: String {
            switch self {
            case .created: return "fs.created"
            case .modified: return "fs.modified"
            case .closedAfterWrite: return "fs.closed"
            case .deleted: return "fs.deleted"
            case .attributes: return "fs.attributes"
            case .moved: return "fs.moved"
            case .overflow: return "fs.overflow"
            case .rescanned: return "fs.rescanned"
            case .error: return "fs.error"
            case .rootDeleted: return "fs.root.deleted"
            case .rootRearmed: return "fs.root.rearmed"
            }
        }

        /// The kind whose event name is `name`, if any.
        public init?(eventName name: String) {
            guard let kind = Kind.byEventName[name] else { return nil }
            self = kind
        }

        private static let byEventName = Dictionary(uniqueKeysWithValues: allCases.map { ($0.eventName, $0) })

        /// Whether this is a change to one path (rather than a notice about the watch).
        public var isPathChange: Bool {
            switch self {
            case .created, .modified, .closedAfterWrite, .deleted, .attributes, .moved: return true
            case .overflow, .rescanned, .error, .rootDeleted, .rootRearmed: return false
            }
        }
    }

    /// How the source learned of a change.
    public enum Origin: String, Sendable, Hashable {
        /// The kernel reported it as it happened.
        case event
        /// It crossed the watch's boundary: moved in (`created`) or out (`deleted`).
        case move
        /// Found by scanning a directory that just appeared (created, moved in, or the re-armed
        /// root): its contents were there before its watch was.
        case scan
        /// Found by comparing the tree with the last known state after events were lost.
        case rescan
    }

    public var kind: Kind
    /// The changed path (absolute); for notices, the watched root (or the path an error concerns).
    public var path: String
    /// For `moved`: where it was.
    public var oldPath: String?
    public var isDirectory: Bool
    public var origin: Origin
    /// For notices: what happened and what to do, for people.
    public var message: String?
    /// For `error`: the kernel limit that was reached, if that was the cause.
    public var limit: FileWatchLimit?
    /// For `error`: the `errno` behind it.
    public var errorNumber: Int32?

    public init(kind: Kind, path: String, oldPath: String? = nil, isDirectory: Bool = false,
                origin: Origin = .event, message: String? = nil, limit: FileWatchLimit? = nil,
                errorNumber: Int32? = nil) {
        self.kind = kind
        self.path = path
        self.oldPath = oldPath
        self.isDirectory = isDirectory
        self.origin = origin
        self.message = message
        self.limit = limit
        self.errorNumber = errorNumber
    }

    /// The event's fields. Only what is set is written, so the common change costs three entries
    /// (``fields(path:isDirectory:origin:)``, then those of the optional properties set).
    public var fields: [String: FieldValue] {
        var fields = Self.fields(path: path, isDirectory: isDirectory, origin: origin)
        if let oldPath { fields["old_path"] = .string(oldPath) }
        if let message { fields["message"] = .string(message) }
        if let limit {
            fields["limit"] = .string(limit.rawValue)
            fields["sysctl"] = .string(limit.sysctl)
        }
        if let errorNumber { fields["errno"] = .int(Int64(errorNumber)) }
        return fields
    }

    /// The fields of a change with no optional property set — what a source posts for nearly
    /// every kernel event — made without a `FileChange`.
    ///
    /// Why a builder of its own: a source that made a `FileChange` only to ask it for its fields
    /// copied and destroyed it twice on the way (~300 instructions per event, callgrind), for
    /// what the three values here say. Made from a copy of a prebuilt dictionary that holds
    /// `is_dir` and `origin` already, whose `path` is written through an index kept with it (a
    /// copy keeps its original's indices): a dictionary built from a literal hashed its three
    /// keys for every event, ~2 000 instructions of the ~10 000 a file event cost from the
    /// kernel's queue to its subscriber (files-reader benchmark).
    public static func fields(path: String, isDirectory: Bool, origin: Origin) -> [String: FieldValue] {
        let template = FieldsTemplate.all[origin.templateIndex * 2 + (isDirectory ? 1 : 0)]
        var fields = template.fields
        fields.values[template.pathIndex] = .string(path)
        return fields
    }
}

/// The fields every file change has, for one origin and type, with room for the others: what
/// ``FileChange/fields`` starts from.
private struct FieldsTemplate: Sendable {
    let fields: [String: FieldValue]
    /// Where `path` is in `fields` (and in every copy of it).
    let pathIndex: Dictionary<String, FieldValue>.Index

    init(origin: FileChange.Origin, isDirectory: Bool) {
        // Room for these three only: every copy is allocated, copied and freed at this size, and
        // the changes with optional fields (moves, notices) are few enough to regrow theirs.
        var fields = [String: FieldValue](minimumCapacity: 3)
        fields["path"] = .string("")
        fields["is_dir"] = .bool(isDirectory)
        fields["origin"] = .string(origin.rawValue)
        self.fields = fields
        pathIndex = fields.index(forKey: "path")!
    }

    /// Indexed by ``FileChange/Origin/templateIndex`` × 2 + (1 for a directory).
    static let all = [FileChange.Origin.event, .move, .scan, .rescan].flatMap { origin in
        [FieldsTemplate(origin: origin, isDirectory: false), FieldsTemplate(origin: origin, isDirectory: true)]
    }
}

extension FileChange.Origin {
    /// This origin's place in `FieldsTemplate.all` (a new origin fails to compile here until it
    /// has one).
    fileprivate var templateIndex: Int {
        switch self {
        case .event: return 0
        case .move: return 1
        case .scan: return 2
        case .rescan: return 3
        }
    }
}

/// A kernel limit on inotify that a watch can run into, and the sysctl that raises it.
public enum FileWatchLimit: String, Sendable, Hashable {
    /// Watches per user (one per watched directory, shared by every process of the user).
    case maxUserWatches = "max_user_watches"
    /// inotify instances per user (each process that watches anything holds one or more).
    case maxUserInstances = "max_user_instances"

    /// `fs.inotify.max_user_watches` or `fs.inotify.max_user_instances`.
    public var sysctl: String { "fs.inotify.\(rawValue)" }
}

extension Event {
    /// The file change this event carries, if it is one.
    public var fileChange: FileChange? {
        guard name.hasPrefix("fs."), let kind = FileChange.Kind(eventName: name),
              let path = fields["path"]?.stringValue
        else { return nil }
        return FileChange(
            kind: kind, path: path, oldPath: fields["old_path"]?.stringValue,
            isDirectory: fields["is_dir"]?.boolValue ?? false,
            origin: fields["origin"]?.stringValue.flatMap(FileChange.Origin.init(rawValue:)) ?? .event,
            message: fields["message"]?.stringValue,
            limit: fields["limit"]?.stringValue.flatMap(FileWatchLimit.init(rawValue:)),
            errorNumber: fields["errno"]?.intValue.map { Int32(truncatingIfNeeded: $0) })
    }
}
