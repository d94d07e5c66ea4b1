import Dispatch

// Conversions from `Duration` for the APIs that count in nanoseconds (Dispatch, libc): one
// implementation for the SDK and, through SPI, the host and its sources, so a negative duration
// is zero everywhere rather than a trap in one place and a negative wait in another.

@_spi(EventBusHost) extension Duration {
    /// Whole nanoseconds, clamped to `0...Int64.max`.
    public var clampedNanoseconds: Int64 {
        let (seconds, attoseconds) = components
        guard seconds >= 0, attoseconds >= 0 else { return 0 }
        let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        let (total, overflowAgain) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
        return overflow || overflowAgain ? .max : total
    }

    /// The duration in seconds, as a `Double` (for display and JSON).
    public var secondsValue: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}

@_spi(EventBusHost) extension DispatchTimeInterval {
    /// `duration` as a Dispatch interval, clamped as ``Duration/clampedNanoseconds``.
    public init(_ duration: Duration) {
        self = .nanoseconds(Int(clamping: duration.clampedNanoseconds))
    }
}
