/// A notice to one subscriber that events meant for it were dropped because its buffer was full
/// (it requested less than was posted, or its mailbox could not keep up). Delivered in the place
/// of the missing events, so order is kept: everything before it arrived, everything after it
/// is newer than the dropped ones.
public struct Gap: Sendable, Hashable {
    public static let eventName = "bus.gap"

    /// How many events were dropped.
    public var dropped: Int
    /// Bus sequence numbers of the first and last dropped event.
    public var firstSequence: UInt64
    public var lastSequence: UInt64

    public init(dropped: Int, firstSequence: UInt64, lastSequence: UInt64) {
        self.dropped = dropped
        self.firstSequence = firstSequence
        self.lastSequence = lastSequence
    }

    /// The notice as its subscriber receives it (SPI: the host merges the notices of a module
    /// in a worker that has not got to the last one yet, as its mailbox would).
    @_spi(EventBusHost) public var event: Event {
        Event(name: Gap.eventName, source: "bus", fields: [
            "dropped": .int(Int64(dropped)),
            "first_sequence": .int(Int64(firstSequence)),
            "last_sequence": .int(Int64(lastSequence)),
        ])
    }
}

extension Event {
    /// The gap notice this event carries, if it is one.
    public var gap: Gap? {
        guard name == Gap.eventName, source == "bus",
              let dropped = fields["dropped"]?.intValue,
              let first = fields["first_sequence"]?.intValue,
              let last = fields["last_sequence"]?.intValue
        else { return nil }
        return Gap(dropped: Int(dropped), firstSequence: UInt64(first), lastSequence: UInt64(last))
    }
}
