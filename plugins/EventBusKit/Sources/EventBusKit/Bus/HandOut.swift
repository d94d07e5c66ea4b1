/// Whether the events a bus delivered have left the process's hands: a position that lets a
/// restart skip events (a durable import's, a journal watch's) must not name one a SIGKILL could
/// still take from a subscriber.
///
/// The bus itself cannot tell: it hands events to subscribers that keep them in buffers of their
/// own. The host sets the check its control socket answers — every tail has written every event
/// through a sequence to its socket, whose bytes the client still reads after the host is gone.
/// Modules are not covered: what a module had not run at a SIGKILL is gone with the process.
@_spi(EventBusHost) extension Bus {
    /// The longest a position waits for ``hasHandedOut(through:)`` unless the host sets another
    /// (``setHandOutPatience(_:)``, from `control.hand_out_patience`): a tail that stops reading
    /// must not hold every position back for ever (it is then at the mercy of its buffer, as for
    /// any other event).
    public static let defaultHandOutPatience = Duration.seconds(10)

    /// Sets (nil: clears) what ``hasHandedOut(through:)`` asks. Any thread.
    public func setHandOutCheck(_ check: (@Sendable (UInt64) -> Bool)?) {
        core.handOutCheck.withLock { $0 = check }
    }

    /// The longest a position of this bus waits for ``hasHandedOut(through:)``: the
    /// `patience` of ``savablePosition(count:now:settle:patience:posted:sequence:handedOut:)``
    /// for the positions of this bus's events. Any thread.
    public var handOutPatience: Duration { core.handOutPatience.withLock { $0 } }

    /// Sets ``handOutPatience``. Any thread.
    public func setHandOutPatience(_ patience: Duration) {
        core.handOutPatience.withLock { $0 = patience }
    }

    /// Whether every subscriber the host waits for has been handed every event through
    /// `sequence`; true when nothing is waited for. Any thread; the check runs outside the bus's
    /// locks.
    public func hasHandedOut(through sequence: UInt64) -> Bool {
        core.handOutCheck.withLock { $0 }?(sequence) ?? true
    }

    /// The rule every saved position follows, for `count` candidates oldest first (their posting
    /// times and bus sequences never decrease; sequence 0: nothing posted yet, nothing to wait
    /// for): a candidate may be saved once it was posted `settle` ago and `handedOut` says its
    /// sequence has been handed out, or once it was posted `patience` ago. Returns the
    /// newest settled candidate and the newest that may be saved (nil: none). Handed out is a
    /// prefix of the settled ones, found by bisection: a few checks, however many wait. Pure.
    public static func savablePosition(count: Int, now: ContinuousClock.Instant, settle: Duration,
                                       patience: Duration = defaultHandOutPatience,
                                       posted: (Int) -> ContinuousClock.Instant, sequence: (Int) -> UInt64,
                                       handedOut: (UInt64) -> Bool) -> (settled: Int?, savable: Int?) {
        let settledBy = now - settle
        let overdue = now - patience
        guard let newestSettled = (0..<count).last(where: { posted($0) <= settledBy }) else { return (nil, nil) }
        var low = 0, high = newestSettled + 1  // invariant: [0, low) handed out, [high, …) not
        while low < high {
            let middle = (low + high) / 2
            if sequence(middle) == 0 || handedOut(sequence(middle)) { low = middle + 1 } else { high = middle }
        }
        let pastPatience = (0...newestSettled).last(where: { posted($0) <= overdue }) ?? -1
        let newest = max(low - 1, pastPatience)
        return (newestSettled, newest >= 0 ? newest : nil)
    }
}
