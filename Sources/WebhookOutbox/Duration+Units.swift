/// The integer units the outbox's file format (milliseconds) and SwiftNIO's timers
/// (nanoseconds) take a `Duration` in.
extension Duration {
    /// Whole milliseconds, rounded down.
    var milliseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }

    /// Whole nanoseconds, rounded down (saturating far beyond any wait the outbox makes).
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        let (scaled, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return overflow ? .max : scaled + attoseconds / 1_000_000_000
    }
}
