import Dispatch
@_spi(EventBusHost) import EventBusKit
import Testing

/// The one Duration → nanoseconds conversion the SDK, the host and its sources share.
@Suite struct DurationConversionTests {
    @Test func clampsToZeroAndToInt64Max() {
        #expect(Duration.milliseconds(1500).clampedNanoseconds == 1_500_000_000)
        #expect(Duration.nanoseconds(7).clampedNanoseconds == 7)
        #expect(Duration.zero.clampedNanoseconds == 0)
        #expect(Duration.seconds(-1).clampedNanoseconds == 0)
        #expect(Duration.milliseconds(-500).clampedNanoseconds == 0)
        #expect(Duration.seconds(Int64.max).clampedNanoseconds == .max)
        #expect(Duration.milliseconds(2500).secondsValue == 2.5)
        #expect(DispatchTimeInterval(.microseconds(3)) == .nanoseconds(3000))
    }

    @Test func aMailboxDrainWithANegativeTimeoutReturnsRatherThanTraps() {
        let mailbox = Mailbox(label: "negative")
        _ = mailbox.drain(timeout: .seconds(-1))
        #expect(mailbox.drain(timeout: patience))
    }
}
