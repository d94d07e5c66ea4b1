import EventBusKit
import Logging

extension ModuleLog {
    /// A module's log, written to the host's swift-log `Logger` with `module=NAME` metadata.
    ///
    /// Why a bridge: the SDK cannot hand modules a swift-log `Logger`, since swift-log is linked
    /// statically into the host and would be a different type inside a module (docs/platform-facts.md, Loading modules);
    /// the SDK's closure-based ``ModuleLog`` crosses the boundary instead.
    ///
    /// At most ``ModuleLogLimit`` lines: past it, lines are left out and the next one written
    /// says how many (lines below the logger's level cost nothing and count for nothing).
    static func bridged(to logger: Logger, module name: String, limit: ModuleLogLimit = ModuleLogLimit()) -> ModuleLog {
        var logger = logger
        logger[metadataKey: "module"] = "\(name)"
        let bucket = ModuleLogLimit.Bucket(limit, now: MonotonicClock.now())
        return ModuleLog { [logger] level, message in
            let swiftLogLevel = level.swiftLogLevel
            guard swiftLogLevel >= logger.logLevel else { return }
            switch bucket.take(at: MonotonicClock.now()) {
            case .suppress: return
            case .writeAfterSuppressed(let count):
                logger.warning("module \(name) logged too fast: \(count) line(s) left out (at most \(limit.burst) at once, then \(limit.perSecond) a second)")
            case .write: break
            }
            logger.log(level: swiftLogLevel, "\(message)")
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
