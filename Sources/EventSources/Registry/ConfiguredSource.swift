import EventBusKit

/// Options of any source kind, as a config or a rule names them: compared and hashed as the
/// options themselves, so a reload sees an unchanged watch as unchanged whatever its kind.
public struct ConfiguredSource: Sendable, Hashable, CustomStringConvertible {
    public let options: any SourceOptions

    public init(_ options: any SourceOptions) {
        self.options = options
    }

    /// The kind's name (`files`, `dbus`).
    public var kind: String { type(of: options).kind }

    /// `files /etc recursive`: the kind and the options, as the log says it.
    public var description: String { "\(kind) \(options)" }

    /// The events of the shared source for the options that match `patterns` (every event it
    /// posts unless narrowed).
    public func publisher(on bus: Bus, for patterns: [EventPattern] = [EventPattern.all]) throws -> EventPublisher {
        try bus.publisher(for: patterns, from: options)
    }

    public static func == (left: ConfiguredSource, right: ConfiguredSource) -> Bool {
        AnyHashable(left.options) == AnyHashable(right.options)
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(AnyHashable(options))
    }
}
