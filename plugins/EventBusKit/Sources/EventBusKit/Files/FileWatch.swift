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

    /// A relative `path` is taken from the current directory. Throws
    /// ``EventBusError/Code/invalidFilePath`` for an empty path.
    public init(path: String, recursive: Bool = false, rearmWhenRecreated: Bool = false) throws {
        guard !path.isEmpty else { throw EventBusError(.invalidFilePath, "file watch path is empty") }
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        self.path = FileWatch.normalize(absolute)
        self.recursive = recursive
        self.rearmWhenRecreated = rearmWhenRecreated
    }

    /// `/etc`, `/srv/www recursive`, `/etc/app.conf rearm`: the part of the source id after `files:`.
    public var description: String {
        var text = path
        if recursive { text += " recursive" }
        if rearmWhenRecreated { text += " rearm" }
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
