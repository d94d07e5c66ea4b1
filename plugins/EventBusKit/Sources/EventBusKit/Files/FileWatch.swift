import Foundation

/// What to watch for file changes: the options of a `files` source.
///
/// Equal options share one source (and the host shares kernel watches even between different
/// options: a watch on `/etc` and a recursive one on `/` use one inotify watch for `/etc`).
public struct FileWatch: SourceOptions {
    public static let kind = "files"

    /// The watched file or directory: absolute and normalized (no `.`, `..` or trailing `/`).
    public let path: String
    /// Whether directories below `path` are watched too, including ones created later.
    public let recursive: Bool
    /// Whether a deleted (or moved away) root is watched again when it reappears. Without it, the
    /// source reports `fs.root.deleted` and goes quiet.
    public let rearmWhenRecreated: Bool
    /// At most this many files and directories known below `path`; nil: no limit. A tree that
    /// grows past it gets an `fs.error` saying so, and the watch stops (its kernel watches and
    /// what it knew are let go). Why: the source remembers every entry of its tree (so a lost
    /// kernel queue can be made good) — a recursive watch on `/` held 72 000 kernel watches and
    /// 250 MB; the host bounds the watches its clients ask for.
    public let entryLimit: Int?

    /// A relative `path` is taken from the current directory. Throws
    /// ``EventBusError/Code/invalidFilePath`` for an empty path.
    public init(path: String, recursive: Bool = false, rearmWhenRecreated: Bool = false, entryLimit: Int? = nil) throws {
        guard !path.isEmpty else { throw EventBusError(.invalidFilePath, "file watch path is empty") }
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        self.path = FileWatch.normalize(absolute)
        self.recursive = recursive
        self.rearmWhenRecreated = rearmWhenRecreated
        self.entryLimit = entryLimit.map { max(1, $0) }
    }

    /// `/etc`, `/srv/www recursive`, `/etc/app.conf rearm`, `/home recursive limit 100000`: the
    /// part of the source id after `files:`. Watches with different limits are different sources.
    public var description: String {
        var text = path
        if recursive { text += " recursive" }
        if rearmWhenRecreated { text += " rearm" }
        if let entryLimit { text += " limit \(entryLimit)" }
        return text
    }

    /// Resolves `.` and `..` lexically (not through symlinks: the watch follows the path the user
    /// named) and drops empty components.
    static func normalize(_ path: String) -> String {
        var parts: [Substring] = []
        for part in path.split(separator: "/") {
            switch part {
            case ".": continue
            case "..": _ = parts.popLast()
            default: parts.append(part)
            }
        }
        return "/" + parts.joined(separator: "/")
    }
}

extension Bus {
    /// `fs.*` events for `path` (see ``FileChange``): the host's shared file-change source.
    /// Throws ``EventBusError/Code/sourceUnavailable`` on a bus without it (a plain `Bus()`).
    public func files(at path: String, recursive: Bool = false,
                      rearmWhenRecreated: Bool = false) throws -> EventPublisher {
        try files(FileWatch(path: path, recursive: recursive, rearmWhenRecreated: rearmWhenRecreated))
    }

    /// `fs.*` events for `watch`.
    public func files(_ watch: FileWatch) throws -> EventPublisher {
        try publisher(for: [FileWatch.allEvents], from: watch)
    }
}

extension FileWatch {
    /// Every event a files source posts: `fs.created` … `fs.root.deleted`.
    static let allEvents = try! EventPattern("fs.>")
}
