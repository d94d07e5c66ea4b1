import EventBusKit
import Logging

extension ModuleLog {
    /// A module's log, written to the host's swift-log `Logger` with `module=NAME` metadata.
    ///
    /// Why a bridge: the SDK cannot hand modules a swift-log `Logger`, since swift-log is linked
    /// statically into the host and would be a different type inside a module (DESIGN.md §3);
    /// the SDK's closure-based ``ModuleLog`` crosses the boundary instead.
    static func bridged(to logger: Logger, module name: String) -> ModuleLog {
        var logger = logger
        logger[metadataKey: "module"] = "\(name)"
        return ModuleLog { [logger] level, message in
            logger.log(level: level.swiftLogLevel, "\(message)")
        }
    }
}

extension ModuleLog.Level {
    var swiftLogLevel: Logger.Level {
        switch self {
        case .debug: return .debug
        case .info: return .info
        case .notice: return .notice
        case .warning: return .warning
        case .error: return .error
        }
    }
}
