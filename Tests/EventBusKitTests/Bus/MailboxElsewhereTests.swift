import Dispatch
@_spi(EventBusHost) import EventBusKit
import Foundation
import Testing

/// Events a batch observer passes on and keeps (``Mailbox/keepElsewhere(events:bytes:)``) count
/// against the mailbox's bounds until released: the bounds hold for everything its module holds,
/// also what has left the mailbox for a worker process.
@Suite struct MailboxElsewhereTests {
    /// A mailbox whose observer keeps every event its subscription took in the batch.
    final class Keeping: @unchecked Sendable {
        let mailbox: Mailbox
        /// What the subscription took in the batch now ending.
        let batch = Collected((events: 0, bytes: 0))
        /// What was kept so far.
        let kept = Collected((events: 0, bytes: 0))
        var subscription: AnyCancellable?

        init(_ mailbox: Mailbox, on bus: Bus) throws {
            self.mailbox = mailbox
            mailbox.setBatchObserver { [batch, kept] in
                let taken = batch.update { taken in
                    defer { taken = (0, 0) }
                    return taken
                }
                mailbox.keepElsewhere(events: taken.events, bytes: taken.bytes)
                kept.update {
                    $0.events += taken.events
                    $0.bytes += taken.bytes
                }
                return true
            }
            subscription = try bus.scoped(to: mailbox).publisher(for: "e.*").sink { [batch] event in
                guard event.gap == nil else { return }
                batch.update {
                    $0.events += 1
                    $0.bytes += event.estimatedBytes
                }
            }
        }
    }

    @Test func eventsKeptElsewhereCountAgainstTheCapacityUntilReleased() async throws {
        let bus = Bus()
        let keeping = try Keeping(Mailbox(label: "elsewhere", capacity: 10), on: bus)
        let mailbox = keeping.mailbox
        for i in 1...25 { bus.post("e.\(i)") }
        // The first ten left the mailbox, but still count: the other fifteen are dropped.
        #expect(await eventually { keeping.kept.value.events == 10 && mailbox.statistics.dropped == 15 })
        #expect(mailbox.statistics.queued == 0)
        #expect(mailbox.statistics.heldElsewhere == 10)
        #expect(mailbox.statistics.heldElsewhereBytes == keeping.kept.value.bytes)

        // Four handled: room for four more.
        mailbox.releaseElsewhere(events: 4, bytes: 0)
        for i in 26...35 { bus.post("e.\(i)") }
        #expect(await eventually { keeping.kept.value.events == 14 && mailbox.statistics.dropped == 21 })
        #expect(mailbox.statistics.heldElsewhere == 10)
        keeping.subscription?.cancel()
    }

    @Test func bytesKeptElsewhereCountAgainstTheByteBoundUntilReleased() async throws {
        let bus = Bus()
        let payload = FieldValue.string(String(repeating: "x", count: 1_000))
        let one = Event(name: "e.1", source: "user", fields: ["p": payload]).estimatedBytes
        let keeping = try Keeping(Mailbox(label: "elsewhere-bytes", capacity: 100, byteCapacity: 3 * one + one / 2), on: bus)
        let mailbox = keeping.mailbox
        for i in 1...10 { bus.post("e.\(i % 10)", fields: ["p": payload]) }
        #expect(await eventually { keeping.kept.value.events == 3 && mailbox.statistics.dropped == 7 })
        #expect(mailbox.statistics.heldElsewhereBytes == 3 * one)
        #expect(mailbox.statistics.queuedBytes == 0)

        mailbox.releaseElsewhere(events: 1, bytes: one)
        for i in 1...2 { bus.post("e.\(i)", fields: ["p": payload]) }
        #expect(await eventually { keeping.kept.value.events == 4 && mailbox.statistics.dropped == 8 })
        keeping.subscription?.cancel()
    }
}
