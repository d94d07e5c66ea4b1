import ConfigText
import EventBusKit

/// The `files` source kind: file changes seen through inotify (README.md in this folder).
public enum FilesKind: SourceKind {
    public typealias Options = FileWatch

    public static let configSection = "files"
    public static let configKeys = ["path", "recursive", "rearm"]
    public static let tailOption = TailOption(option: "files", wire: .member("files"))
    public static let notices = ["fs.overflow", "fs.rescanned", "fs.error"]

    /// `{name, path, recursive?, rearm?}`; a relative path resolves against the config file's
    /// folder, as module paths do.
    public static func options(from fields: [String: ConfigNode], of entry: ConfigNode,
                               directory: String) throws(ConfigError) -> FileWatch {
        guard let pathNode = fields["path"] else { throw entry.error("a files watch needs a path") }
        var path = try pathNode.string()
        guard !path.isEmpty else { throw pathNode.error("must not be empty") }
        if !path.hasPrefix("/") { path = directory + "/" + path }
        let recursive = try fields["recursive"]?.bool() ?? false
        let rearm = try fields["rearm"]?.bool() ?? false
        do {
            return try FileWatch(path: path, recursive: recursive, rearmWhenRecreated: rearm)
        } catch {
            throw pathNode.error(describing: error)
        }
    }

    /// `files: PATH` or `files: {path, recursive}`; the path absolute.
    public static func ruleSource(_ value: ConfigNode) throws(ConfigError) -> FileWatch {
        var path: String
        var recursive = false
        if let text = try? value.string() {
            path = text
        } else {
            let parts = try value.fields(allowed: ["path", "recursive"])
            guard let pathNode = parts["path"] else { throw value.error("needs a path") }
            path = try pathNode.string()
            recursive = try parts["recursive"]?.bool() ?? false
        }
        guard path.hasPrefix("/") else { throw value.error("must be an absolute path") }
        do {
            return try FileWatch(path: path, recursive: recursive)
        } catch {
            throw value.error(describing: error)
        }
    }

    public static func register(on bus: Bus, environment: SourceEnvironment) -> (@Sendable () -> [String: String])? {
        FileSources.register(on: bus)
        return nil
    }
}
