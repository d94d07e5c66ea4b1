@_spi(EventBusHost) import EventBusKit

/// How an exec module's lines are made, given by the host: the event JSON of `eventbus tail
/// --json` and the field matches of `eventbus tail FIELD=VALUE`, which live with the control
/// socket (EventBusHost) — so a program reads exactly what a tail prints, and a subscription's
/// matches mean what a tail's do.
public struct ExecLineFormat: Sendable {
    /// Makes one session's encoder, which appends an event's line (with its newline). Called on
    /// one thread at a time.
    public var makeEncoder: @Sendable () -> (Event, inout [UInt8]) -> Void
    /// A filter accepting the events whose fields match `FIELD → values` (values of one field
    /// are alternatives, fields must all match).
    public var makeFilter: @Sendable ([String: [String]]) -> @Sendable (Event) -> Bool

    public init(makeEncoder: @escaping @Sendable () -> (Event, inout [UInt8]) -> Void,
                makeFilter: @escaping @Sendable ([String: [String]]) -> @Sendable (Event) -> Bool) {
        self.makeEncoder = makeEncoder
        self.makeFilter = makeFilter
    }
}
