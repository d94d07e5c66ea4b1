/// Whether the events a bus delivered have left the process's hands: a position that lets a
/// restart skip events (a durable import's, a journal watch's) must not name one a SIGKILL could
/// still take from a subscriber.
///
/// The bus itself cannot tell: it hands events to subscribers that keep them in buffers of their
/// own. The host sets the check its control socket answers — every tail has written every event
/// through a sequence to its socket, whose bytes the client still reads after the host is gone.
/// Modules are not covered: what a module had not run at a SIGKILL is gone with the process.
@_spi(EventBusHost) extension Bus {
    /// The longest a position waits for ``hasHandedOut(through:)``: a tail that stops reading
    /// must not hold every position back for ever (it is then at the mercy of its buffer, as for
    /// any other event).
    public static let handOutPatience = Duration.seconds(10)

    /// Sets (nil: clears) what ``hasHandedOut(through:)`` asks. Any thread.
    public func setHandOutCheck(_ check: (@Sendable (UInt64) -> Bool)?) {
        core.handOutCheck.withLock { $0 = check }
    }

    /// Whether every subscriber the host waits for has been handed every event through
    /// `sequence`; true when nothing is waited for. Any thread; the check runs outside the bus's
    /// locks.
    public func hasHandedOut(through sequence: UInt64) -> Bool {
        core.handOutCheck.withLock { $0 }?(sequence) ?? true
    }
}
