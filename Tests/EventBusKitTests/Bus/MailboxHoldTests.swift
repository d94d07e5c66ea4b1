import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import Testing

/// A batch observer that answers `false` holds the mailbox's queue without a thread waiting:
/// events queue to the bounds and drop past them, and ``Mailbox/resumeAfterHold()`` lets it go
/// on — also when it comes before the queue got to hold.
@Suite struct MailboxHoldTests {
    @Test func aHeldMailboxDeliversNothingDropsPastItsBoundAndGoesOnWhenResumed() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "held", capacity: 10)
        let holdNext = Collected(true)
        let holds = Collected(0)
        mailbox.setBatchObserver {
            holdNext.update { hold in
                defer { hold = false }
                if hold { holds.update { $0 += 1 } }
                return !hold
            }
        }
        // The subscription's demand is the queue's first batch; then it holds.
        let subscriber = RecordingSubscriber()
        try bus.scoped(to: mailbox).publisher(for: "e.*").subscribe(subscriber)
        #expect(await eventually { holds.value == 1 })
        for i in 1...50 { bus.post("e.\(i)") }
        // Held: nothing runs, so exactly the bound waits and the rest is dropped.
        #expect(mailbox.statistics.queued == 10)
        #expect(mailbox.statistics.dropped == 40)
        #expect(subscriber.events.isEmpty)

        mailbox.resumeAfterHold()
        #expect(await eventually { subscriber.events.count == 11 })  // ten events and the gap
        #expect(subscriber.names.prefix(10) == ArraySlice((1...10).map { "e.\($0)" }))
        #expect(subscriber.events.last?.gap == Gap(dropped: 40, firstSequence: 11, lastSequence: 50))
        #expect(mailbox.drain(timeout: patience))
        #expect(mailbox.statistics.queued == 0)
        #expect(holds.value == 1)
        #expect(subscriber.violations.isEmpty)
    }

    /// The channel may take what waits (and resume) before the queue has set its hold: that
    /// resume counts, and the queue goes straight on.
    @Test func aResumeThatComesBeforeTheHoldIsNotLost() async throws {
        let bus = Bus()
        let mailbox = Mailbox(label: "early")
        let subscriber = RecordingSubscriber()
        try bus.scoped(to: mailbox).publisher(for: "e.*").subscribe(subscriber)
        mailbox.setBatchObserver {
            mailbox.resumeAfterHold()  // before the queue holds
            return false
        }
        for i in 1...1_000 { bus.post("e.\(i)") }
        #expect(await eventually { subscriber.events.count == 1_000 })
        #expect(mailbox.drain(timeout: patience))
        #expect(mailbox.statistics.dropped == 0)
        #expect(subscriber.violations.isEmpty)
        mailbox.setBatchObserver(nil)  // it holds the mailbox
    }
}
