import EventBusKit

/// A file or journal watch of `sources.files` / `sources.journal`, kept running by the host.
public struct WatchConfig: Sendable, Hashable {
    public enum Source: Sendable, Hashable, CustomStringConvertible {
        case files(FileWatch)
        case journal(JournalWatch)

        public var description: String {
            switch self {
            case .files(let watch): return "files \(watch)"
            case .journal(let watch): return "journal \(watch)"
            }
        }
    }

    public var name: String
    public var source: Source

    public init(name: String, source: Source) {
        self.name = name
        self.source = source
    }
}

extension WatchConfig: HeldSource {
    static let noun = "watch"
    var summary: String { "\(source)" }

    func publisher(on bus: Bus) throws -> EventPublisher {
        switch source {
        case .files(let options): return try bus.files(options)
        case .journal(let options): return try bus.journal(options)
        }
    }
}
