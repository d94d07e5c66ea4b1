import ControlProtocol
import EventBusKit

/// What `eventbusd --check-config` (``LoadCheck``) and a worker started in check mode
/// (``WorkerProcess/Mode/check``) say over the worker's socket: one JSON line each way, each
/// side closing its direction after it. Not frames (``FrameType``): there is one request and one
/// answer, and nothing else runs in a checking worker.
///
/// The config section travels over the socket, not in the worker's arguments, where any user
/// could read it in `/proc/PID/cmdline`.
public enum LoadCheckWire {
    /// `{path, config}`: the module file as configured and its section.
    public struct Request: Sendable {
        public var path: String
        public var config: ModuleConfig

        public init(path: String, config: ModuleConfig) {
            self.path = path
            self.config = config
        }

        public var json: JSON { ["path": .string(path), "config": config.json] }

        public init?(json: JSON) {
            guard let path = json["path"]?.stringValue else { return nil }
            self.init(path: path, config: ModuleConfig(json: json["config"] ?? [:]))
        }
    }

    public enum Reply: Sendable, Equatable {
        /// `{resolved_path, declares_keys, config_problems, config_keys}`: loaded, export record
        /// opened, and the section checked against the module's declaration — the problems by
        /// path inside the section (none: it fits), for the host to place in its file.
        case loaded(resolvedPath: String, declaresKeys: Bool, problems: [ModuleConfigProblem], keysSummary: String)
        /// `{error}`: the loader refused the file (``ModuleLoadError``'s description, so the
        /// words are those of a refusal in eventbusd).
        case refused(String)

        public var json: JSON {
            switch self {
            case .loaded(let resolvedPath, let declaresKeys, let problems, let keysSummary):
                var reply = ConfigProblemsWire.encode(problems, keysSummary: keysSummary)
                reply["resolved_path"] = .string(resolvedPath)
                reply["declares_keys"] = .bool(declaresKeys)
                return .object(reply)
            case .refused(let message):
                return ["error": .string(message)]
            }
        }

        public init?(json: JSON) {
            if let message = json["error"]?.stringValue {
                self = .refused(message)
                return
            }
            guard let resolvedPath = json["resolved_path"]?.stringValue, let declaresKeys = json["declares_keys"]?.boolValue,
                  let checked = ConfigProblemsWire.decode(json) else { return nil }
            self = .loaded(resolvedPath: resolvedPath, declaresKeys: declaresKeys, problems: checked.problems,
                           keysSummary: checked.keysSummary)
        }
    }
}
