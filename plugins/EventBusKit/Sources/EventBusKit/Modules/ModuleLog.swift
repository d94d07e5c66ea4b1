/// A module's logger. The host decides where lines go (journald, stderr) and tags each with the
/// module's name.
///
/// Why not swift-log's `Logger` directly: the SDK must be the only copy of every type that
/// crosses the module boundary (docs/platform-facts.md, Loading modules), and the host links swift-log statically through
/// its own dependencies; a `Logger` from one copy is not the same type in the other.
public struct ModuleLog: Sendable {
    public enum Level: String, Sendable, Comparable, CaseIterable {
        case debug, info, notice, warning, error

        public static func < (a: Level, b: Level) -> Bool {
            allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
        }
    }

    private let write: @Sendable (Level, String) -> Void

    public init(_ write: @escaping @Sendable (Level, String) -> Void) {
        self.write = write
    }

    public func log(_ level: Level, _ message: @autoclosure () -> String) { write(level, message()) }
    public func debug(_ message: @autoclosure () -> String) { write(.debug, message()) }
    public func info(_ message: @autoclosure () -> String) { write(.info, message()) }
    public func notice(_ message: @autoclosure () -> String) { write(.notice, message()) }
    public func warning(_ message: @autoclosure () -> String) { write(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { write(.error, message()) }
}
